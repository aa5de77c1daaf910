#!/usr/bin/env bash
# The daemon: cold start, idle memory, POST /runs latency at 1 and 20 clients, and the end-to-end
# overhead of a run through the API against the same run in-process. See BENCHMARKS.md for what
# each figure means and the results on record.
#
#   scripts/bench-daemon.sh
#
# Settings (environment):
#   BENCH_START_REPS=15   cold starts timed (each on a fresh state root, then a restart on it)
#   BENCH_LOAD_REPS=3     load rounds, each with a fresh daemon: 1 client, then 20 clients
#   BENCH_SEQ_POSTS=200   POSTs of the 1-client round (one after another)
#   BENCH_CLIENTS=20      clients of the concurrent round
#   BENCH_CLIENT_POSTS=25 POSTs per client in the concurrent round (20 x 25 = 500 runs)
#   BENCH_E2E_REPS=15     interleaved trials of the 3-step run, in-process and through the daemon
#   BENCH_WORKERS=        --workers of the daemon (default: its own, the number of CPUs)
#   BENCH_TMP=/tmp        where the fresh CAIRN_HOMEs are made
#   BENCH_OUT=bench-out/daemon-<time>   where raw outputs (samples, daemon logs) are kept
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$(pwd)

OUT=${BENCH_OUT:-$ROOT/bench-out/daemon-$(date +%Y%m%dT%H%M%S)}
CAIRN=$ROOT/target/release/cairn

log() { printf '==> %s\n' "$*" >&2; }

mkdir -p "$OUT"
log "raw outputs in $OUT"
log "cargo build --release"
cargo build --release -q
log "load before: $(uptime)"

WORK=$(mktemp -d -p "${BENCH_TMP:-/tmp}" cairn-bench-daemon.XXXXXX)
trap 'rm -rf "$WORK"' EXIT

# The measured workflow: a 3-step chain of the cheapest tool, as in scripts/bench-engine.sh.
mkdir -p "$WORK/chain3"
{
  printf '[workflow]\nname = "bench-chain-3"\nversion = "1.0.0"\n\n[tools.echo]\ncommand = ["/bin/echo", "{}"]\n\n'
  printf '[[steps]]\nid = "s0"\ntool = "echo"\nargs = {}\n\n'
  for i in 1 2; do
    printf '[[steps]]\nid = "s%d"\ntool = "echo"\nneeds = ["s%d"]\nargs = {}\n\n' "$i" "$((i - 1))"
  done
} > "$WORK/chain3/workflow.toml"
echo '{}' > "$WORK/input.json"

BENCH_CAIRN=$CAIRN BENCH_WORK=$WORK BENCH_OUT=$OUT python3 - <<'PY'
"""The measurement driver: stdlib only (urllib/http.client, threads)."""
import http.client, json, os, signal, socket, statistics, subprocess, tempfile, threading, time
import urllib.request, urllib.error

CAIRN, WORK, OUT = os.environ["BENCH_CAIRN"], os.environ["BENCH_WORK"], os.environ["BENCH_OUT"]
TMP = os.environ.get("BENCH_TMP", "/tmp")
START_REPS = int(os.environ.get("BENCH_START_REPS", 15))
LOAD_REPS = int(os.environ.get("BENCH_LOAD_REPS", 3))
SEQ_POSTS = int(os.environ.get("BENCH_SEQ_POSTS", 200))
CLIENTS = int(os.environ.get("BENCH_CLIENTS", 20))
CLIENT_POSTS = int(os.environ.get("BENCH_CLIENT_POSTS", 25))
E2E_REPS = int(os.environ.get("BENCH_E2E_REPS", 15))
WORKERS = os.environ.get("BENCH_WORKERS", "")
WF, WF_DIR, INPUT = "bench-chain-3", f"{WORK}/chain3", f"{WORK}/input.json"
TERMINAL = {"READY", "BLOCKED", "FAILED", "CANCELLED"}
results = {}


def log(msg):
    print(f"==> {msg}", flush=True, file=__import__("sys").stderr)


def ms(seconds):
    return seconds * 1000.0


def med(xs):
    return statistics.median(xs)


def pct(xs, p):
    s = sorted(xs)
    return s[round((len(s) - 1) * p)]


def memory_kib(pid):
    fields = {}
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            k, _, v = line.partition(":")
            if k in ("VmRSS", "VmHWM"):
                fields[k] = int(v.split()[0])
    return fields["VmRSS"], fields["VmHWM"]


def fresh_home():
    return tempfile.mkdtemp(prefix="cairn-home.", dir=TMP)


def cairn(home, *args, check=True):
    env = dict(os.environ, CAIRN_HOME=home, CAIRN_QUIET_DAEMON="1")
    env.pop("XDG_STATE_HOME", None)
    return subprocess.run([CAIRN, *args], env=env, check=check, capture_output=True, text=True)


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def health_once(port):
    """One GET /health; None while nothing listens yet."""
    try:
        c = http.client.HTTPConnection("127.0.0.1", port, timeout=5)
        c.request("GET", "/health")
        r = c.getresponse()
        r.read()
        c.close()
        return r.status
    except (ConnectionRefusedError, ConnectionResetError):
        return None


class Daemon:
    """`cairn daemon run` in the foreground on a chosen port, timed from spawn to the first 200."""

    def __init__(self, home, tag):
        self.home, self.port = home, free_port()
        self.log = open(f"{OUT}/daemon-{tag}.log", "ab")
        args = [CAIRN, "daemon", "run", "--port", str(self.port)] + (["--workers", WORKERS] if WORKERS else [])
        env = dict(os.environ, CAIRN_HOME=home)
        env.pop("XDG_STATE_HOME", None)
        t0 = time.perf_counter()
        self.proc = subprocess.Popen(args, env=env, stdin=subprocess.DEVNULL, stdout=self.log, stderr=self.log)
        while True:
            status = health_once(self.port)
            if status == 200:
                break
            if self.proc.poll() is not None:
                raise SystemExit(f"the daemon exited {self.proc.returncode}; see {self.log.name}")
            if time.perf_counter() - t0 > 20:
                raise SystemExit(f"the daemon did not answer within 20 s; see {self.log.name}")
            time.sleep(0.0002)
        self.start_s = time.perf_counter() - t0
        self.url = f"http://127.0.0.1:{self.port}"
        with open(f"{home}/auth/operator.token") as f:
            self.token = f.read().strip()

    def memory(self):
        return memory_kib(self.proc.pid)

    def request(self, method, path, body=None, conn=None):
        """One request; a fresh connection unless `conn` is given. Returns (status, json)."""
        c = conn or http.client.HTTPConnection("127.0.0.1", self.port, timeout=60)
        headers = {"Authorization": f"Bearer {self.token}"}
        data = None
        if body is not None:
            data = json.dumps(body)
            headers["Content-Type"] = "application/json"
        c.request(method, path, body=data, headers=headers)
        r = c.getresponse()
        payload = r.read()
        if conn is None:
            c.close()
        return r.status, (json.loads(payload) if payload else None)

    def post_run(self, run_id, thread="bench"):
        t0 = time.perf_counter()
        status, body = self.request("POST", "/runs", {"thread_id": thread, "agent_id": WF, "input": {}, "run_id": run_id})
        took = time.perf_counter() - t0
        assert status == 202 and body["run_id"] == run_id, (status, body)
        return took

    def wait_all_terminal(self, expected, timeout=300):
        t0 = time.perf_counter()
        while True:
            status, body = self.request("GET", "/runs?limit=1000")
            runs = body["runs"]
            if len(runs) >= expected and all(r["status"] in TERMINAL for r in runs):
                return runs, time.perf_counter() - t0
            if time.perf_counter() - t0 > timeout:
                raise SystemExit(f"runs did not finish within {timeout} s")
            time.sleep(0.02)

    def stop(self):
        self.proc.send_signal(signal.SIGTERM)
        self.proc.wait(timeout=30)
        self.log.close()


# --- (a) cold start and (b) idle RSS after start ------------------------------------------------
log(f"(a) cold start x {START_REPS}: a fresh state root, then a restart on it; idle RSS 1 s after start")
fresh, restart, idle_rss, daemon_start_cmd = [], [], [], []
for rep in range(START_REPS):
    home = fresh_home()
    d = Daemon(home, f"start-{rep}")
    fresh.append(d.start_s)
    time.sleep(1.0)
    idle_rss.append(d.memory()[0])
    d.stop()
    d = Daemon(home, f"start-{rep}")
    restart.append(d.start_s)
    d.stop()
    # `cairn daemon start` as a user types it: spawns the detached daemon, returns once it answers.
    t0 = time.perf_counter()
    cairn(home, "daemon", "start", "--json")
    daemon_start_cmd.append(time.perf_counter() - t0)
    cairn(home, "daemon", "stop", "--json")
    subprocess.run(["rm", "-rf", home])
results["start"] = {
    "fresh_ms": [round(ms(x), 2) for x in fresh],
    "restart_ms": [round(ms(x), 2) for x in restart],
    "daemon_start_cmd_ms": [round(ms(x), 2) for x in daemon_start_cmd],
    "idle_rss_kib": idle_rss,
}

# --- (c) POST /runs latency, (b) RSS after the load -------------------------------------------------
log(f"(c) POST /runs latency: {LOAD_REPS} rounds of {SEQ_POSTS} POSTs from 1 client, then {CLIENTS} x {CLIENT_POSTS} at once")
rounds = []
for rep in range(LOAD_REPS):
    home = fresh_home()
    cairn(home, "workflow", "add", WF_DIR, "--json")
    d = Daemon(home, f"load-{rep}")
    rss0 = d.memory()[0]
    # The HTTP floor of this client: GET /health, no token, no database.
    health = []
    for _ in range(100):
        t0 = time.perf_counter()
        health_once(d.port)
        health.append(time.perf_counter() - t0)
    # The same floor at CLIENTS threads of this client at once.
    health_conc, barrier, lock = [], threading.Barrier(CLIENTS), threading.Lock()

    def health_client():
        mine = []
        barrier.wait()
        for _ in range(CLIENT_POSTS):
            t0 = time.perf_counter()
            health_once(d.port)
            mine.append(time.perf_counter() - t0)
        with lock:
            health_conc.extend(mine)

    threads = [threading.Thread(target=health_client) for _ in range(CLIENTS)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    # 1 client, one POST after another (a new connection each, as the CLI does).
    t0 = time.perf_counter()
    seq = [d.post_run(f"seq-{rep}-{i:04d}") for i in range(SEQ_POSTS)]
    seq_wall = time.perf_counter() - t0
    # run.created is committed before the 202: check it on a sample.
    for i in range(0, SEQ_POSTS, 20):
        rid = f"seq-{rep}-{i:04d}"
        _, ev = d.request("GET", f"/runs/{rid}/events")
        assert ev["events"][0]["kind"] == "run.created", ev
    _, seq_drain = d.wait_all_terminal(SEQ_POSTS)
    # 20 clients at once, behind a barrier.
    barrier = threading.Barrier(CLIENTS)
    conc = []

    def client(c):
        mine = []
        barrier.wait()
        for k in range(CLIENT_POSTS):
            mine.append(d.post_run(f"conc-{rep}-{c:02d}-{k:03d}", thread=f"client-{c}"))
        with lock:
            conc.extend(mine)

    t0 = time.perf_counter()
    threads = [threading.Thread(target=client, args=(c,)) for c in range(CLIENTS)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    conc_wall = time.perf_counter() - t0
    runs, _ = d.wait_all_terminal(SEQ_POSTS + CLIENTS * CLIENT_POSTS)
    conc_done = time.perf_counter() - t0
    statuses = {}
    for r in runs:
        statuses[r["status"]] = statuses.get(r["status"], 0) + 1
    assert len(runs) == SEQ_POSTS + CLIENTS * CLIENT_POSTS and statuses == {"READY": len(runs)}, statuses
    time.sleep(2.0)
    rss_after, hwm_after = d.memory()
    # Tokio lets an idle blocking thread go after 10 s: read again once they are gone.
    time.sleep(10.0)
    rss_later = d.memory()[0]
    rounds.append({
        "rss_start_kib": rss0, "rss_after_load_kib": rss_after, "rss_after_load_12s_kib": rss_later, "hwm_kib": hwm_after,
        "health_med_ms": ms(med(health)), "health_conc_med_ms": ms(med(health_conc)),
        "health_conc_p99_ms": ms(pct(health_conc, 0.99)),
        "seq_med_ms": ms(med(seq)), "seq_p90_ms": ms(pct(seq, 0.9)), "seq_p99_ms": ms(pct(seq, 0.99)),
        "seq_max_ms": ms(max(seq)), "seq_drain_s": seq_drain, "seq_posts_per_s": SEQ_POSTS / seq_wall,
        "conc_med_ms": ms(med(conc)), "conc_p90_ms": ms(pct(conc, 0.9)), "conc_p99_ms": ms(pct(conc, 0.99)),
        "conc_max_ms": ms(max(conc)), "conc_posts_per_s": len(conc) / conc_wall, "conc_submit_s": conc_wall,
        "conc_all_ready_s": conc_done, "runs": len(runs),
    })
    json.dump({"seq_s": seq, "conc_s": conc, "health_s": health}, open(f"{OUT}/latency-{rep}.json", "w"))
    d.stop()
    subprocess.run(["rm", "-rf", home])
results["load"] = rounds

# --- (d) end to end: a 3-step run through the daemon against in-process ---------------------------
log(f"(d) end to end, 3-step chain, {E2E_REPS} interleaved trials (one untimed warm-up of each)")
home = fresh_home()
cairn(home, "workflow", "add", WF_DIR, "--json")
d = Daemon(home, "e2e")


def timed_cli(*extra):
    t0 = time.perf_counter()
    r = cairn(home, "run", WF, "--input", INPUT, "--json", *extra)
    took = time.perf_counter() - t0
    out = json.loads(r.stdout)
    assert out["status"] == "READY", out
    return took


def timed_api_follow(run_id):
    """POST, then the SSE stream until run.finished, on fresh connections (as the CLI does)."""
    t0 = time.perf_counter()
    d.post_run(run_id)
    c = http.client.HTTPConnection("127.0.0.1", d.port, timeout=60)
    c.request("GET", f"/runs/{run_id}/events?follow=true",
              headers={"Authorization": f"Bearer {d.token}", "Accept": "text/event-stream"})
    r = c.getresponse()
    while True:
        line = r.fp.readline()
        if not line or line.strip() == b"event: run.finished":
            break
    took = time.perf_counter() - t0
    c.close()
    return took


def timed_api_poll(run_id):
    """POST, then GET /runs/{id} every 2 ms on one kept-alive connection until terminal."""
    t0 = time.perf_counter()
    d.post_run(run_id)
    c = http.client.HTTPConnection("127.0.0.1", d.port, timeout=60)
    while True:
        _, body = d.request("GET", f"/runs/{run_id}", conn=c)
        if body["status"] in TERMINAL:
            break
        time.sleep(0.002)
    took = time.perf_counter() - t0
    c.close()
    return took


timed_cli("--in-process")
timed_cli()
timed_api_follow("e2e-warm-f")
timed_api_poll("e2e-warm-p")
inproc, via_cli, via_follow, via_poll = [], [], [], []
for rep in range(E2E_REPS):
    inproc.append(timed_cli("--in-process"))
    via_cli.append(timed_cli())
    via_follow.append(timed_api_follow(f"e2e-f-{rep}"))
    via_poll.append(timed_api_poll(f"e2e-p-{rep}"))
d.stop()
subprocess.run(["rm", "-rf", home])
results["e2e"] = {k: [round(ms(x), 2) for x in v] for k, v in
                  {"in_process_ms": inproc, "cli_daemon_ms": via_cli, "api_follow_ms": via_follow,
                   "api_poll_ms": via_poll}.items()}
json.dump(results, open(f"{OUT}/results.json", "w"), indent=1)

# --- report -----------------------------------------------------------------------------------------
def yes(ok):
    return "yes" if ok else "NO"


s = results["start"]
print(f"\n## Daemon start (medians of {START_REPS})\n")
print("| measure | median | min | max | target | met |")
print("|---|---:|---:|---:|---|---|")
for label, key, target in (("`daemon run`: spawn → first 200 from GET /health, fresh state root", "fresh_ms", 100),
                           ("`daemon run`: the same, restart on an existing state root", "restart_ms", 100),
                           ("`cairn daemon start` whole command (detached daemon, waits for it)", "daemon_start_cmd_ms", None)):
    v = s[key]
    t = f"< {target} ms" if target else "—"
    m = yes(med(v) < target) if target else "—"
    print(f"| {label} | {med(v):.1f} ms | {min(v):.1f} | {max(v):.1f} | {t} | {m} |")

L = results["load"]
mib = lambda kib: kib / 1024.0
idle = med(s["idle_rss_kib"])
after = med([r["rss_after_load_kib"] for r in L])
hwm = med([r["hwm_kib"] for r in L])
total = SEQ_POSTS + CLIENTS * CLIENT_POSTS
print(f"\n## Daemon memory (VmRSS; the load: {total} runs, {SEQ_POSTS} from 1 client then {CLIENTS * CLIENT_POSTS} from {CLIENTS}; medians)\n")
print("| measure | median | each | target | met |")
print("|---|---:|---|---|---|")
each = lambda xs: ", ".join(f"{mib(x):.1f}" for x in xs)
later = med([r["rss_after_load_12s_kib"] for r in L])
print(f"| idle, 1 s after start (x{START_REPS}) | {mib(idle):.1f} MiB | {mib(min(s['idle_rss_kib'])):.1f}–{mib(max(s['idle_rss_kib'])):.1f} | < 30 MiB | {yes(mib(idle) < 30)} |")
print(f"| idle, 2 s after the load (x{len(L)}) | {mib(after):.1f} MiB | {each([r['rss_after_load_kib'] for r in L])} | < 30 MiB | {yes(mib(after) < 30)} |")
print(f"| idle, 12 s after the load, idle blocking threads gone (x{len(L)}) | {mib(later):.1f} MiB | {each([r['rss_after_load_12s_kib'] for r in L])} | < 30 MiB | {yes(mib(later) < 30)} |")
print(f"| peak (VmHWM) over the load | {mib(hwm):.1f} MiB | {each([r['hwm_kib'] for r in L])} | — | — |")
print(f"\n## POST /runs → 202 (run.created committed), medians over {len(L)} rounds\n")
print("| clients | POSTs | median | p90 | p99 | max | POSTs/s | all READY after |")
print("|---:|---:|---:|---:|---:|---:|---:|---:|")
g = lambda k: med([r[k] for r in L])
print(f"| 1 | {SEQ_POSTS} | {g('seq_med_ms'):.2f} ms | {g('seq_p90_ms'):.2f} ms | {g('seq_p99_ms'):.2f} ms | {g('seq_max_ms'):.1f} ms "
      f"| {g('seq_posts_per_s'):.0f} | — |")
print(f"| {CLIENTS} | {CLIENTS * CLIENT_POSTS} | {g('conc_med_ms'):.2f} ms | {g('conc_p90_ms'):.2f} ms | {g('conc_p99_ms'):.2f} ms "
      f"| {g('conc_max_ms'):.1f} ms | {g('conc_posts_per_s'):.0f} | {g('conc_all_ready_s'):.2f} s |")
print(f"\nThe client's floor, GET /health (no token, no database; a new connection each): median {g('health_med_ms'):.2f} ms "
      f"from 1 client; median {g('health_conc_med_ms'):.2f} ms, p99 {g('health_conc_p99_ms'):.2f} ms from {CLIENTS} threads at once")

E = results["e2e"]
base = med(E["in_process_ms"])
print(f"\n## 3-step chain end to end, medians of {E2E_REPS} interleaved trials\n")
print("| path | median | vs in-process | difference | each |")
print("|---|---:|---:|---:|---|")
for label, key in (("`cairn run --in-process` (whole process)", "in_process_ms"),
                   ("`cairn run` through the daemon (whole process)", "cli_daemon_ms"),
                   ("API: POST + SSE follow until run.finished", "api_follow_ms"),
                   ("API: POST + GET /runs/{id} every 2 ms until terminal", "api_poll_ms")):
    v = med(E[key])
    print(f"| {label} | {v:.1f} ms | {v / base:.2f}× | {v - base:+.1f} ms | {E[key]} |")
PY
log "load after: $(uptime)"
