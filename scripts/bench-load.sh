#!/usr/bin/env bash
# A thousand concurrent runs through the daemon, as an agent running sweeps makes them: N ten-step
# chains of `/bin/echo` POSTed at once to `POST /runs`, then waited for. Reports the steps per
# second from the first POST to the last run's end, each run's latency (created to finished,
# p50/p99), the daemon's peak memory, and, measured in the same run, the ceiling: the same number of
# `/bin/echo` spawned and waited for alone (`xargs -P`, as many at once as the daemon's workers).
# See BENCHMARKS.md §18.
#
#   scripts/bench-load.sh                  # 1,000 runs of 10 steps
#
# Settings (environment):
#   BENCH_RUNS=1000       runs submitted
#   BENCH_STEPS=10        steps of each run (a chain)
#   BENCH_CLIENTS=20      clients POSTing at once
#   BENCH_CONNECTION=keep-alive   each client keeps its connection open from one request to the
#                         next, as an HTTP client library's session does; `close` opens one a
#                         request, as the figures of BENCHMARKS §18 before its eighth increment
#                         were measured (with `urllib.request`, whose clients cost more CPU)
#   BENCH_WORKERS=        --workers of the daemon (default: its own)
#   BENCH_TMP=/tmp        where the state root is made
#   BENCH_OUT=bench-out/load-<time>   where raw outputs are kept
#   BENCH_CAIRN=PATH      the cairn binary (default: this checkout's release build, built first)
#   BENCH_KEEP=1          keep the state root (its 12,000 directories) instead of deleting it at
#                         the end. On ext4 without a journal (this project's CI and dev VMs), an
#                         inode freed in the last five minutes is skipped by every allocation that
#                         meets it, so a round run within five minutes of deleting another's state
#                         pays about 0.1 ms more a step in `mkdir` than on a disk that freed
#                         nothing lately: rounds compared back to back keep their states, and
#                         they are deleted after the last.
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$(pwd)

RUNS=${BENCH_RUNS:-1000}
STEPS=${BENCH_STEPS:-10}
CLIENTS=${BENCH_CLIENTS:-20}
WORKERS=${BENCH_WORKERS:-}
TMPBASE=${BENCH_TMP:-/tmp}
OUT=${BENCH_OUT:-$ROOT/bench-out/load-$(date +%Y%m%dT%H%M%S)}
CAIRN=${BENCH_CAIRN:-}
export BENCH_CONNECTION=${BENCH_CONNECTION:-keep-alive}
case "$BENCH_CONNECTION" in
  keep-alive | close) ;;
  *) echo "BENCH_CONNECTION must be keep-alive or close, not '$BENCH_CONNECTION'" >&2; exit 2 ;;
esac

log() { printf '==> %s\n' "$*" >&2; }
for tool in jq python3; do
  command -v "$tool" > /dev/null || { echo "bench-load needs $tool" >&2; exit 2; }
done

mkdir -p "$OUT"
log "raw outputs in $OUT"
if [ -z "$CAIRN" ]; then
  log "cargo build --release"
  cargo build --release -q
  CAIRN=$ROOT/target/release/cairn
fi

WORK=$(mktemp -d -p "$TMPBASE" cairn-load.XXXXXX)
export CAIRN_HOME=$WORK/state
SAMPLER=
cleanup() {
  [ -z "$SAMPLER" ] || kill "$SAMPLER" 2> /dev/null || true
  "$CAIRN" daemon stop > /dev/null 2>&1 || true
  [ -n "${BENCH_KEEP:-}" ] || rm -rf "$WORK"
}
trap cleanup EXIT

mkdir -p "$WORK/wf"
{
  printf '[workflow]\nname = "load"\nversion = "1.0.0"\n\n[tools.echo]\ncommand = ["/bin/echo", "{}"]\n\n'
  printf '[[steps]]\nid = "s0"\ntool = "echo"\nargs = { n = "${input.n}" }\n\n'
  for ((i = 1; i < STEPS; i++)); do
    printf '[[steps]]\nid = "s%d"\ntool = "echo"\nneeds = ["s%d"]\nargs = {}\n\n' "$i" "$((i - 1))"
  done
} > "$WORK/wf/workflow.toml"
"$CAIRN" workflow add "$WORK/wf" --json > /dev/null
if [ -n "$WORKERS" ]; then
  "$CAIRN" daemon start --workers "$WORKERS" > "$OUT/daemon.txt"
else
  "$CAIRN" daemon start > "$OUT/daemon.txt"
fi
DAEMON_PID=$(jq -r .pid "$CAIRN_HOME/daemon.json")
URL=$(jq -r .url "$CAIRN_HOME/daemon.json")
TOKEN=$(cat "$CAIRN_HOME/auth/operator.token")
log "daemon $DAEMON_PID at $URL ($(cat "$OUT/daemon.txt"))"
PAR=$(grep -o 'workers [0-9]*' "$CAIRN_HOME/daemon.log" 2> /dev/null | head -1 | awk '{print $2}' || true)
PAR=${PAR:-${WORKERS:-$(nproc)}}

log "submitting $RUNS runs of $STEPS steps ($CLIENTS clients at once)"
python3 - "$URL" "$TOKEN" "$RUNS" "$CLIENTS" "$OUT" << 'EOF'
import http.client, json, os, resource, sys, threading, time, urllib.parse
url, token, runs, clients, out = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4]), sys.argv[5]
# BENCH_CONNECTION (above): one connection a client, kept open (an agent's `requests.Session` or
# `httpx.Client`), or one a request.
keep = os.environ["BENCH_CONNECTION"] == "keep-alive"
where = urllib.parse.urlsplit(url)
headers = {"Authorization": "Bearer " + token, "Content-Type": "application/json"}
class Client:
    def __init__(self):
        self.conn = None
    def call(self, method, path, body=None):
        if self.conn is None:
            self.conn = http.client.HTTPConnection(where.hostname, where.port)
        self.conn.request(method, path, body=body, headers=headers if keep else {**headers, "Connection": "close"})
        r = self.conn.getresponse()
        data = r.read()
        assert r.status in (200, 202), (r.status, data[:200])
        if not keep or r.will_close:
            self.conn.close()
            self.conn = None
        return json.loads(data)
ids, lock, nxt = [], threading.Lock(), [0]
def client():
    c = Client()
    while True:
        with lock:
            n = nxt[0]; nxt[0] += 1
        if n >= runs:
            return
        body = json.dumps({"workflow": "load", "thread_id": "bench-load", "input": {"n": n}, "run_id": f"load-{n:05d}"}).encode()
        run = c.call("POST", "/runs", body)
        with lock:
            ids.append(run["run_id"])
t0 = time.time()
ts = [threading.Thread(target=client) for _ in range(clients)]
for t in ts: t.start()
for t in ts: t.join()
t1 = time.time()
ru = resource.getrusage(resource.RUSAGE_SELF)
json.dump({"submitted_at": t0, "posted_s": t1 - t0, "ids": ids, "client_cpu_s": ru.ru_utime + ru.ru_stime},
          open(out + "/submitted.json", "w"))
# Wait for every run to end, then read each run's times.
waiter = Client()
get = lambda path: waiter.call("GET", path)
while True:
    open_runs = get("/runs?status=RUNNING&limit=1")["runs"] + get("/runs?status=PENDING&limit=1")["runs"]
    if not open_runs:
        break
    time.sleep(0.05)
t2 = time.time()
rows = get(f"/runs?limit={min(runs, 1000)}")["runs"]
json.dump({"done_at": t2, "runs": rows}, open(out + "/done.json", "w"))
EOF
DAEMON_HWM=$(awk '/VmHWM/ {print $2}' "/proc/$DAEMON_PID/status")
# The daemon's own CPU time over its life (user + system, in clock ticks), and its reaped
# children's (the tools'): what a step costs the machine beside the tool itself.
read -r DAEMON_CPU TOOLS_CPU < <(sed 's/.*) //' "/proc/$DAEMON_PID/stat" | awk '{print $12 + $13, $14 + $15}')
TICK=$(getconf CLK_TCK)

log "the ceiling: $((RUNS * STEPS)) /bin/echo spawned and waited for, $PAR at once"
T0=$EPOCHREALTIME
seq "$((RUNS * STEPS))" | xargs -P "$PAR" -n 1 /bin/echo > /dev/null
T1=$EPOCHREALTIME

python3 - "$OUT" "$RUNS" "$STEPS" "$T0" "$T1" "$DAEMON_HWM" "$PAR" "$DAEMON_CPU" "$TOOLS_CPU" "$TICK" << 'EOF' | tee "$OUT/summary.txt"
import json, sys
from datetime import datetime
out, runs, steps, t0, t1, hwm, par = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), float(sys.argv[4]), float(sys.argv[5]), int(sys.argv[6]), sys.argv[7]
daemon_cpu, tools_cpu, tick = int(sys.argv[8]), int(sys.argv[9]), int(sys.argv[10])
sub, done = json.load(open(out + "/submitted.json")), json.load(open(out + "/done.json"))
rows = done["runs"]
statuses = {}
for r in rows:
    statuses[r["status"]] = statuses.get(r["status"], 0) + 1
ts = lambda s: datetime.fromisoformat(s.replace("Z", "+00:00")).timestamp()
lat = sorted(ts(r["finished_at"]) - ts(r["created_at"]) for r in rows if r.get("finished_at"))
last_end = max(ts(r["finished_at"]) for r in rows if r.get("finished_at"))
wall = last_end - sub["submitted_at"]
pct = lambda p: lat[min(len(lat) - 1, round((len(lat) - 1) * p))]
total = runs * steps
ceiling = total / (t1 - t0)
print(f"runs: {runs} of {steps} steps ({total} steps), statuses {statuses}")
print(f"posted in {sub['posted_s']:.2f} s (the clients' CPU {sub['client_cpu_s']:.2f} s); the last run ended {wall:.2f} s after the first POST")
print(f"throughput: {total / wall:.0f} steps/s")
print(f"run latency (created to finished): p50 {pct(0.5):.2f} s, p99 {pct(0.99):.2f} s")
print(f"the ceiling, {total} /bin/echo with {par} at once: {t1 - t0:.2f} s, {ceiling:.0f} spawns/s; Cairn reaches {100 * total / wall / ceiling:.0f} % of it")
print(f"daemon peak RSS: {hwm} KiB")
print(f"CPU a step: the daemon's {1000 * daemon_cpu / tick / total:.3f} ms, the tool's {1000 * tools_cpu / tick / total:.3f} ms (the daemon's whole life, start-up and submissions included)")
EOF

# The key figures as rows for BENCHMARKS.md's summary table:
#   scripts/bench-table.py --record "$OUT/results.json" && scripts/bench-table.py --write
python3 - "$OUT" "$RUNS" "$STEPS" "$CLIENTS" "$T0" "$T1" "$DAEMON_HWM" "$PAR" "$WORKERS" << 'EOF_RESULTS'
import json, os, platform, subprocess, sys, time
from datetime import datetime
out, runs, steps, clients, t0, t1, hwm, par, workers = sys.argv[1:]
runs, steps, t0, t1, hwm = int(runs), int(steps), float(t0), float(t1), int(hwm)
sub, done = json.load(open(out + "/submitted.json")), json.load(open(out + "/done.json"))
ts = lambda s: datetime.fromisoformat(s.replace("Z", "+00:00")).timestamp()
ended = [r for r in done["runs"] if r.get("finished_at")]
lat = sorted(ts(r["finished_at"]) - ts(r["created_at"]) for r in ended)
pct = lambda p: lat[min(len(lat) - 1, round((len(lat) - 1) * p))]
wall = max(ts(r["finished_at"]) for r in ended) - sub["submitted_at"]
total = runs * steps
rate, ceiling = total / wall, total / (t1 - t0)
cpu = {k.strip(): v.strip() for k, v in (l.split(":", 1) for l in open("/proc/cpuinfo").read().split("\n\n")[0].splitlines() if ":" in l)}
machine = f"{os.cpu_count()} vCPUs, {cpu['model name']} family {cpu['cpu family']} model {cpu['model']}, kernel {platform.release()}"
close = os.environ.get("BENCH_CONNECTION") == "close"
suffix = (f"_w{workers}" if workers else "") + ("_close" if close else "")
load = f"{runs:,} concurrent {steps}-step runs of `/bin/echo`, {clients} clients ({'a connection a request' if close else 'each its connection, kept'}), {par} step slots (`--workers`)"
fig = lambda value, unit: {"value": value, "unit": unit}
rows = [
    {"id": f"load.throughput{suffix}", "benchmark": f"{load}: steps/s; the ceiling (the same spawns alone, {par} at once); the share of it",
     "target": "1,500 steps/s or 80 % of the ceiling",
     "measured": "{steps_per_s:,.0f} steps/s; {ceiling_per_s:,.0f} spawns/s; {share_pct:.0f} %",
     "figures": {"steps_per_s": fig(round(rate, 1), "steps/s"), "ceiling_per_s": fig(round(ceiling, 1), "spawns/s"),
                 "share_pct": fig(round(100 * rate / ceiling, 1), "%")},
     "met": rate >= 1500 or rate / ceiling >= 0.8},
    {"id": f"load.latency{suffix}", "benchmark": f"{load}: a run's latency, created → finished, p50 / p99", "target": None,
     "measured": "{p50_s:.2f} s / {p99_s:.2f} s", "figures": {"p50_s": fig(round(pct(0.5), 3), "s"), "p99_s": fig(round(pct(0.99), 3), "s")},
     "met": None},
    {"id": f"load.memory{suffix}", "benchmark": f"{load}: the daemon's peak RSS", "target": None,
     "measured": "{daemon_peak_mib:.1f} MiB", "figures": {"daemon_peak_mib": fig(round(hwm / 1024, 2), "MiB")}, "met": None},
]
commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True).stdout.strip()
settings = f"BENCH_RUNS={runs} BENCH_STEPS={steps} BENCH_CLIENTS={clients}" + (f" BENCH_WORKERS={workers}" if workers else "")
settings += " BENCH_KEEP=1" if os.environ.get("BENCH_KEEP") else ""
settings += " BENCH_CONNECTION=close" if close else ""
json.dump({"format": 1, "family": "load", "order": 18, "section": "18. A thousand concurrent runs (issue 35)",
           "command": f"scripts/bench-load.sh  # {settings}, at {commit}",
           "date": time.strftime("%Y-%m-%d", time.gmtime()), "machine": machine, "rows": rows},
          open(f"{out}/results.json", "w"), indent=2, ensure_ascii=False)
EOF_RESULTS
log "results for BENCHMARKS.md: scripts/bench-table.py --record $OUT/results.json && scripts/bench-table.py --write"
