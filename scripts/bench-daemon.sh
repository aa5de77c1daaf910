#!/usr/bin/env bash
# The daemon: cold start, idle memory, POST /runs latency at 1 and 20 clients, and the end-to-end
# overhead of a run through the API against the same run in-process; and, as `rss`, its resident
# memory over 10,000 runs (issue 21). See BENCHMARKS.md for what each figure means and the
# results on record.
#
#   scripts/bench-daemon.sh               # start, idle memory, latency, end to end (BENCHMARKS.md §6)
#   scripts/bench-daemon.sh rss           # RSS over BENCH_RUNS runs through one warm daemon (issue 21:
#                                         # "the daemon's RSS after 10,000 runs stays under 40 MiB")
#
# Settings (environment):
#   CAIRN_BIN=            the cairn binary to measure (default: `cargo build --release -p cairn`,
#                         then target/release/cairn)
#   BENCH_WORKERS=        --workers of the daemon (default: its own, the number of CPUs)
#   BENCH_TMP=/tmp        where the fresh CAIRN_HOMEs are made
#   BENCH_OUT=bench-out/daemon[-rss]-<time>   where raw outputs (samples, daemon logs) are kept
# the default suite:
#   BENCH_START_REPS=15   cold starts timed (each on a fresh state root, then a restart on it)
#   BENCH_LOAD_REPS=3     load rounds, each with a fresh daemon: 1 client, then 20 clients
#   BENCH_SEQ_POSTS=200   POSTs of the 1-client round (one after another)
#   BENCH_CLIENTS=20      clients of the concurrent round
#   BENCH_CLIENT_POSTS=25 POSTs per client in the concurrent round (20 x 25 = 500 runs)
#   BENCH_E2E_REPS=15     interleaved trials of the 3-step run, in-process and through the daemon
# `rss`:
#   BENCH_RUNS=10000      runs submitted (the 3-step chain below, each with its own run id)
#   BENCH_BATCH=100       runs POSTed before waiting for all of them to finish (the most ever queued)
#   BENCH_SETTLE=0.2      seconds between the last run of a batch finishing and a sample
#   BENCH_IDLE=12         seconds idle before the last sample (Tokio lets an idle blocking thread
#                         go after 10 s); 0 to skip it
#   BENCH_BUDGET=780      seconds of submitting after which the next sample is the last (the rate
#                         is reported; the figures are then for fewer runs than BENCH_RUNS)
#
# How `rss` submits (the path, and why): `cairn run` has no detached mode (Ctrl-C detaches, and
# only `kernel exec` has --detach), and 10,000 `cairn run` processes would measure process starts
# more than the daemon. So the runs go in as the CLI's own request does (`cairn run` POSTs to
# /runs, crates/cairn/src/follow.rs), `POST /runs` with the operator token from the state root
# (auth/operator.token), on one kept-alive connection from a stdlib Python client (curl would be
# a process per request, or per batch with no per-run check of the answer):
# the daemon creates, queues and executes each run exactly as for `cairn run` (the same handler,
# `Service::submit_run`, the same worker pool). What the CLI does besides, following the run's
# event stream, is not done per run; completion is read from `GET /runs?status=…` instead. Runs
# go in batches of BENCH_BATCH and each batch is waited for (every run READY, checked) before the
# next, so the pool's queue never holds more than a batch and every sample is taken with the
# daemon quiet: VmRSS and VmHWM (and RssAnon, RssFile, Threads) from /proc/<pid>/status, and
# AnonHugePages from smaps_rollup, after 0, 100, 1000, 2000, ... runs (smaps_rollup itself is kept
# in BENCH_OUT at 0, 1,000 and the end). Growth per run is (RSS at the end - RSS at 1,000) /
# (runs - 1,000): the registry's SQLite page cache (2 MiB a connection by default) fills over the
# first runs. The figure depends on transparent huge pages: mimalloc v3 madvises its arena
# MADV_HUGEPAGE, so with THP set to `madvise` or `always` every 2 MiB of it that is touched can be
# one huge page (the "of it THP" column). The daemon inherits the environment of `cairn daemon
# start`, so `MIMALLOC_ALLOW_THP=0 scripts/bench-daemon.sh rss` measures it without them.
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$(pwd)

MODE=${1:-suite}
case "$MODE" in
  suite | rss) ;;
  *) echo "usage: $0 [rss]" >&2; exit 2 ;;
esac
OUT=${BENCH_OUT:-$ROOT/bench-out/daemon$([ "$MODE" = rss ] && echo -rss)-$(date +%Y%m%dT%H%M%S)}

log() { printf '==> %s\n' "$*" >&2; }

mkdir -p "$OUT"
log "raw outputs in $OUT"
if [ -n "${CAIRN_BIN:-}" ]; then
  CAIRN=$CAIRN_BIN
  log "measuring $CAIRN (CAIRN_BIN)"
else
  log "cargo build --release -p cairn"
  cargo build --release -q -p cairn
  CAIRN=$ROOT/target/release/cairn
fi
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

# --- the default suite: start, idle memory, POST latency, end to end ----------------------------
suite() {
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
}

# --- rss: the daemon's memory over BENCH_RUNS runs ------------------------------------------------
rss() {
  # Global, not local: the EXIT trap runs after this function has returned.
  RSS_HOME=$WORK/state
  local home=$RSS_HOME
  trap 'CAIRN_HOME=$RSS_HOME "$CAIRN" daemon stop > /dev/null 2>&1 || true; rm -rf "$WORK"' EXIT
  export CAIRN_QUIET_DAEMON=1
  unset XDG_STATE_HOME
  CAIRN_HOME=$home "$CAIRN" workflow add "$WORK/chain3" --json > /dev/null
  CAIRN_HOME=$home "$CAIRN" daemon start ${BENCH_WORKERS:+--workers "$BENCH_WORKERS"} > "$OUT/daemon.txt"
  log "$(cat "$OUT/daemon.txt")"
  CAIRN_HOME=$home "$CAIRN" daemon status --json > "$OUT/daemon-status.json"
  local pid url
  pid=$(jq -r .pid "$OUT/daemon-status.json")
  url=$(jq -r .url "$OUT/daemon-status.json")
  [ "$(jq -r .running "$OUT/daemon-status.json")" = true ] && [ -r "/proc/$pid/status" ] \
    || { log "the daemon is not running: $(cat "$OUT/daemon-status.json")"; exit 1; }
  log "daemon pid $pid at $url, $(grep -c '^processor' /proc/cpuinfo) CPUs, workers ${BENCH_WORKERS:-default}"
  log "transparent huge pages: $(cat /sys/kernel/mm/transparent_hugepage/enabled 2> /dev/null || echo unknown)$(
    [ -z "${MIMALLOC_ALLOW_THP:-}" ] || echo ", MIMALLOC_ALLOW_THP=$MIMALLOC_ALLOW_THP")"

  BENCH_PID=$pid BENCH_URL=$url BENCH_HOME=$home BENCH_OUT=$OUT python3 - <<'PY'
"""Submits the runs in batches through the warm daemon and samples its memory between them."""
import http.client, json, os, sys, time, urllib.parse

PID, URL, HOME, OUT = int(os.environ["BENCH_PID"]), os.environ["BENCH_URL"], os.environ["BENCH_HOME"], os.environ["BENCH_OUT"]
RUNS = int(os.environ.get("BENCH_RUNS", 10000))
BATCH = int(os.environ.get("BENCH_BATCH", 100))
SETTLE = float(os.environ.get("BENCH_SETTLE", 0.2))
IDLE = float(os.environ.get("BENCH_IDLE", 12))
BUDGET = float(os.environ.get("BENCH_BUDGET", 780))
WF = "bench-chain-3"
TOKEN = open(f"{HOME}/auth/operator.token").read().strip()
u = urllib.parse.urlsplit(URL)
HOST, PORT = u.hostname, u.port


def log(msg):
    print(f"==> {msg}", file=sys.stderr, flush=True)


class Client:
    """One kept-alive connection; reconnects once if the daemon closed it (every request here is
    safe to repeat: a POST names its run id, and the same id with the same input is idempotent)."""

    def __init__(self):
        self.conn = None

    def request(self, method, path, body=None):
        data = json.dumps(body) if body is not None else None
        headers = {"Authorization": f"Bearer {TOKEN}"}
        if data is not None:
            headers["Content-Type"] = "application/json"
        for attempt in (0, 1):
            if self.conn is None:
                self.conn = http.client.HTTPConnection(HOST, PORT, timeout=120)
            try:
                self.conn.request(method, path, body=data, headers=headers)
                r = self.conn.getresponse()
                payload = r.read()
                return r.status, (json.loads(payload) if payload else None)
            except (http.client.RemoteDisconnected, ConnectionResetError, BrokenPipeError):
                self.conn.close()
                self.conn = None
                if attempt:
                    raise


def memory():
    """The daemon's /proc/<pid>/status figures, in KiB (Threads as a count)."""
    want = ("VmRSS", "VmHWM", "RssAnon", "RssFile", "RssShmem", "Threads")
    fields = {}
    with open(f"/proc/{PID}/status") as f:
        for line in f:
            k, _, v = line.partition(":")
            if k in want:
                fields[k] = int(v.split()[0])
    return fields


def huge_kib():
    """AnonHugePages: anonymous memory backed by transparent huge pages (2 MiB each)."""
    try:
        with open(f"/proc/{PID}/smaps_rollup") as f:
            return next((int(l.split()[1]) for l in f if l.startswith("AnonHugePages:")), 0)
    except OSError:
        return 0


def db_bytes():
    return sum(os.path.getsize(f"{HOME}/cairn.db{s}") for s in ("", "-wal", "-shm") if os.path.exists(f"{HOME}/cairn.db{s}"))


def smaps(tag):
    try:
        with open(f"/proc/{PID}/smaps_rollup") as f, open(f"{OUT}/smaps_rollup-{tag}.txt", "w") as o:
            o.write(f.read())
    except OSError:
        pass


c = Client()
status, _ = c.request("GET", "/runs?limit=1")
assert status == 200, status
samples = []
t_start = time.perf_counter()


def sample(runs, label=None):
    m = memory()
    m.update(runs=runs, label=label or str(runs), t=time.perf_counter() - t_start, db=db_bytes(), huge=huge_kib())
    samples.append(m)
    log(f"{m['label']:>14} runs: RSS {m['VmRSS'] / 1024:.1f} MiB, HWM {m['VmHWM'] / 1024:.1f} MiB, THP {m['huge'] / 1024:.0f} MiB, "
        f"{m['Threads']} threads, registry {m['db'] / 2**20:.1f} MiB, {m['t']:.1f} s")
    json.dump(samples, open(f"{OUT}/samples.json", "w"), indent=1)


def idle_count(status):
    s, body = c.request("GET", f"/runs?status={status}&limit=1")
    assert s == 200, (s, body)
    return len(body["runs"])


def drain():
    """Until no run is PENDING or RUNNING (PENDING asked first: a run leaves it for RUNNING)."""
    while idle_count("PENDING") or idle_count("RUNNING"):
        time.sleep(0.01)


checkpoints = sorted({0, 100, RUNS} | set(range(1000, RUNS, 1000)))
checkpoints = [k for k in checkpoints if k <= RUNS]
sample(0)
smaps("0")
done, stopped_early = 0, False
for target in checkpoints[1:]:
    while done < target:
        n = min(BATCH, target - done)
        ids = [f"rss-{done + i:06d}" for i in range(n)]
        for rid in ids:
            s, body = c.request("POST", "/runs", {"thread_id": "bench-rss", "workflow": WF, "input": {}, "run_id": rid})
            assert s == 202 and body["run_id"] == rid, (rid, s, body)
        drain()
        s, body = c.request("GET", f"/runs?workflow={WF}&limit={min(1000, 2 * n)}")
        listed = {r["run_id"]: r["status"] for r in body["runs"]}
        bad = [(rid, listed.get(rid)) for rid in ids if listed.get(rid) != "READY"]
        assert not bad, f"runs not READY: {bad[:5]}"
        done += n
    time.sleep(SETTLE)
    sample(done)
    if done == 1000:
        smaps("1000")
    if time.perf_counter() - t_start > BUDGET and done < RUNS:
        stopped_early = True
        log(f"over the budget of {BUDGET:.0f} s after {done} runs: stopping here")
        break
wall = samples[-1]["t"]
last = samples[-1]
smaps(str(done))
if IDLE > 0:
    time.sleep(IDLE)
    sample(done, f"{done}, idle {IDLE:g} s")
    smaps(f"{done}-idle")
if c.conn is not None:
    c.conn.close()

# The daemon's own record of the runs: one "run ID READY after N ms" line each.
ready_logged = sum(1 for line in open(f"{HOME}/daemon.log", errors="replace") if " READY after " in line)

mib = lambda kib: kib / 1024.0
print(f"\n## Daemon memory over {done} runs (3-step chain of /bin/echo, batches of {BATCH}, through POST /runs)\n")
print("| runs | RSS MiB | HWM MiB | anon MiB | of it THP MiB | file MiB | threads | registry MiB | s | runs/s since previous |")
print("|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
prev = None
for m in samples:
    rate = "—"
    if prev is not None and m["runs"] > prev["runs"]:
        rate = f"{(m['runs'] - prev['runs']) / (m['t'] - prev['t']):.0f}"
    print(f"| {m['label']} | {mib(m['VmRSS']):.1f} | {mib(m['VmHWM']):.1f} | {mib(m['RssAnon']):.1f} | {mib(m['huge']):.1f} "
          f"| {mib(m['RssFile']):.1f} | {m['Threads']} | {m['db'] / 2**20:.1f} | {m['t']:.1f} | {rate} |")
    prev = m
base = next((m for m in samples if m["runs"] == 1000), None) if done > 1000 else None
if base is None:
    base = samples[0]
per_run = (last["VmRSS"] - base["VmRSS"]) / max(1, last["runs"] - base["runs"])
print(f"\n{done} runs in {wall:.1f} s ({done / wall:.0f} runs/s); the daemon logged {ready_logged} READY runs"
      + (f"; STOPPED EARLY at the {BUDGET:.0f} s budget (BENCH_RUNS={RUNS})" if stopped_early else ""))
json.dump({"samples": samples, "runs": done, "wall_s": wall, "batch": BATCH, "growth_kib_per_run": per_run,
           "from_runs": base["runs"], "ready_logged": ready_logged, "stopped_early": stopped_early},
          open(f"{OUT}/results.json", "w"), indent=1)
print(f"RSS after {done} runs: {mib(last['VmRSS']):.1f} MiB (HWM {mib(last['VmHWM']):.1f} MiB); growth from "
      f"{base['runs']} to {done} runs: {per_run:.3f} KiB/run; under 40 MiB: {'yes' if last['VmRSS'] < 40 * 1024 else 'NO'}")
assert ready_logged == done, (ready_logged, done)
PY
  log "load after: $(uptime)"
}

"$MODE"
