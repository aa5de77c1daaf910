#!/usr/bin/env bash
# The web app and the API it reads, with a full registry: GET /runs latency at limit=1000 and
# limit=50 (and the other reads of the app's pages), against `cairn runs --json` in-process, then
# page loads in a real browser (Debian's chromium through playwright-core, tools/webapp-e2e/):
# the Runs page (it asks for 200 runs) and one run's page (it asks for the run, its workflow, its
# events and its replays), reached inside the app by `location.hash` and by full reloads.
#
#   scripts/bench-webapp.sh
#
# Settings (environment):
#   BENCH_RUNS=1000       finished runs put in the registry (POST /runs of a 1-step `/bin/echo {}`
#                         workflow with the Operator token, BENCH_FILL_CLIENTS at once)
#   BENCH_FILL_CLIENTS=4  concurrent POST clients while filling
#   BENCH_PLANNED=1       1 makes every other run through a plan (POST /plans, then execute), so
#                         half the runs have a reservation, as planned runs do; 0 makes none
#   BENCH_API_REPS=50     timed requests per API endpoint (interleaved, a new connection each, after
#                         5 untimed ones), with the Viewer token
#   BENCH_CLI_REPS=10     timed `cairn runs --limit N --json` commands per limit
#   BENCH_PAGE_REPS=10    timed loads per page and way in the browser (after one untimed)
#   BENCH_BROWSER=1       0 skips the browser part (needs /usr/bin/chromium and `npm ci` in
#                         tools/webapp-e2e/)
#   BENCH_WORKERS=        --workers of the daemon (default: its own, the number of CPUs)
#   BENCH_TMP=/tmp        where the fresh CAIRN_HOME is made
#   BENCH_OUT=bench-out/webapp-<time>   where raw samples, results.json and the daemon log are kept
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$(pwd)

OUT=${BENCH_OUT:-$ROOT/bench-out/webapp-$(date +%Y%m%dT%H%M%S)}
CAIRN=$ROOT/target/release/cairn
E2E=$ROOT/tools/webapp-e2e
BROWSER=${BENCH_BROWSER:-1}
STARTED=$(date +%s)

log() { printf '==> %s\n' "$*" >&2; }

mkdir -p "$OUT"
OUT=$(cd "$OUT" && pwd)
log "raw outputs in $OUT"
if [ "$BROWSER" = 1 ]; then
  [ -x /usr/bin/chromium ] || { echo "no /usr/bin/chromium (apt-get install --no-install-recommends chromium, or BENCH_BROWSER=0)" >&2; exit 1; }
  [ -d "$E2E/node_modules/playwright-core" ] || { echo "no playwright-core in $E2E (npm ci there, or BENCH_BROWSER=0)" >&2; exit 1; }
fi
log "cargo build --release"
cargo build --release -q
LOAD_BEFORE=$(uptime)
log "load before: $LOAD_BEFORE"

WORK=$(mktemp -d -p "${BENCH_TMP:-/tmp}" cairn-bench-webapp.XXXXXX)
export CAIRN_HOME=$WORK/home CAIRN_QUIET_DAEMON=1
unset XDG_STATE_HOME
DAEMON_STARTED=0
cleanup() {
  if [ "$DAEMON_STARTED" = 1 ]; then
    cp "$CAIRN_HOME/daemon.log" "$OUT/daemon.log" 2>/dev/null || true
    "$CAIRN" daemon stop --json >/dev/null 2>&1 || echo "warning: cairn daemon stop failed" >&2
  fi
  rm -rf "$WORK"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

# The workflow of every run: one step of the cheapest tool, as in scripts/bench-daemon.sh.
mkdir -p "$WORK/echo1"
printf '[workflow]\nname = "bench-echo-1"\nversion = "1.0.0"\n\n[tools.echo]\ncommand = ["/bin/echo", "{}"]\n\n[[steps]]\nid = "s0"\ntool = "echo"\nargs = {}\n' \
  > "$WORK/echo1/workflow.toml"
"$CAIRN" workflow add "$WORK/echo1" --json >/dev/null
mkdir -p "$WORK/planned"
export BENCH_PLANNED_DIR=$WORK/planned
"$CAIRN" daemon start ${BENCH_WORKERS:+--workers "$BENCH_WORKERS"} --json > "$OUT/daemon-start.json"
DAEMON_STARTED=1
log "daemon: $(tr -d '\n ' < "$OUT/daemon-start.json")"

BENCH_CAIRN=$CAIRN BENCH_OUT=$OUT python3 - <<'PY'
"""Fills the registry, then times the API and the CLI. Stdlib only."""
import http.client, json, os, statistics, subprocess, sys, threading, time

CAIRN, OUT, HOME = os.environ["BENCH_CAIRN"], os.environ["BENCH_OUT"], os.environ["CAIRN_HOME"]
RUNS = int(os.environ.get("BENCH_RUNS", 1000))
FILL_CLIENTS = int(os.environ.get("BENCH_FILL_CLIENTS", 4))
PLANNED = os.environ.get("BENCH_PLANNED", "1") == "1"
PLANNED_DIR = os.environ["BENCH_PLANNED_DIR"]
API_REPS = int(os.environ.get("BENCH_API_REPS", 50))
CLI_REPS = int(os.environ.get("BENCH_CLI_REPS", 10))
LIST = min(RUNS, 1000)  # the API's largest limit
WF = "bench-echo-1"


def log(msg):
    print(f"==> {msg}", flush=True, file=sys.stderr)


daemon = json.load(open(f"{HOME}/daemon.json"))
URL = daemon["url"].rstrip("/")
HOST, PORT = URL.split("//")[1].split(":")
PORT = int(PORT)
OPERATOR = open(f"{HOME}/auth/operator.token").read().strip()
VIEWER = open(f"{HOME}/auth/viewer.token").read().strip()


def request(method, path, token, body=None):
    """One request on a fresh connection (as curl and the CLI do). Returns (status, bytes)."""
    c = http.client.HTTPConnection(HOST, PORT, timeout=120)
    headers = {"Authorization": f"Bearer {token}"}
    data = None
    if body is not None:
        data = json.dumps(body)
        headers["Content-Type"] = "application/json"
    c.request(method, path, body=data, headers=headers)
    r = c.getresponse()
    payload = r.read()
    c.close()
    return r.status, payload


def first_sse_event(path, token):
    """Time to the first complete event of a Server-Sent Events stream; then hangs up."""
    c = http.client.HTTPConnection(HOST, PORT, timeout=120)
    c.request("GET", path, headers={"Authorization": f"Bearer {token}", "Accept": "text/event-stream"})
    r = c.getresponse()
    assert r.status == 200, r.status
    size = 0
    while True:
        line = r.fp.readline()
        size += len(line)
        if not line or line in (b"\n", b"\r\n"):
            break
    c.close()
    return size


# --- fill: BENCH_RUNS finished runs --------------------------------------------------------------
log(f"fill: {RUNS} runs of {WF} ({'every other one planned and executed, the rest ' if PLANNED else ''}POST /runs, {FILL_CLIENTS} clients, Operator token)")
t0 = time.perf_counter()
lock, next_i = threading.Lock(), [0]


def client():
    while True:
        with lock:
            i = next_i[0]
            next_i[0] += 1
        if i >= RUNS:
            return
        if PLANNED and i % 2:
            name = f"bench-{i:05d}"
            status, body = request("POST", "/plans", OPERATOR, {"workflow": WF, "input": {}, "target": "local",
                                   "run_dir": f"{PLANNED_DIR}/{name}", "plan_name": name})
            assert status == 201, (status, body)
            plan = json.loads(body)
            status, body = request("POST", f"/plans/{name}/execute", OPERATOR,
                                   {"plan_id": plan["plan_id"], "plan_checksum": plan["plan_checksum"]})
            assert status == 202, (status, body)
            continue
        status, body = request("POST", "/runs", OPERATOR,
                               {"thread_id": "bench", "agent_id": WF, "input": {}, "run_id": f"bench-{i:05d}"})
        assert status == 202, (status, body)


threads = [threading.Thread(target=client) for _ in range(FILL_CLIENTS)]
for t in threads:
    t.start()
for t in threads:
    t.join()
submitted = time.perf_counter() - t0
while True:
    active = [json.loads(request("GET", f"/runs?status={s}&limit=1", VIEWER)[1])["runs"] for s in ("PENDING", "RUNNING")]
    if not any(active):
        break
    if time.perf_counter() - t0 > 900:
        raise SystemExit("the runs did not finish within 900 s")
    time.sleep(0.5)
filled = time.perf_counter() - t0
status, body = request("GET", f"/runs?limit={LIST}", VIEWER)
assert status == 200, (status, body[:200])
runs = json.loads(body)["runs"]
assert len(runs) == LIST, len(runs)
statuses = {}
for r in runs:
    statuses[r["status"]] = statuses.get(r["status"], 0) + 1
assert statuses == {"READY": LIST}, statuses
log(f"fill: {RUNS} POSTs in {submitted:.1f} s, all READY after {filled:.1f} s")
RUN_ID = runs[len(runs) // 2]["run_id"]  # one from the middle of the list
open(f"{OUT}/run-id", "w").write(RUN_ID)
run = json.loads(request("GET", f"/runs/{RUN_ID}", VIEWER)[1])

# --- the API, Viewer token ------------------------------------------------------------------------
endpoints = {
    "runs_max": f"/runs?limit={LIST}",
    "runs_200": "/runs?limit=200",
    "runs_50": "/runs?limit=50",
    "run": f"/runs/{RUN_ID}",
    "events": f"/runs/{RUN_ID}/events",
    "workflow": f"/workflows/{WF}?version={run['version']}",
    "health": "/health",
}
sizes = {}
for key, path in endpoints.items():
    for _ in range(5):
        status, body = request("GET", path, VIEWER)
        assert status == 200, (path, status, body[:200])
    sizes[key] = len(body)
    if key.startswith("runs_"):
        n = len(json.loads(body)["runs"])
        assert n == min(int(path.split("=")[1]), RUNS), (path, n)
sizes["runs_follow_200_first_event"] = first_sse_event("/runs?follow=true&limit=200", VIEWER)
log(f"API: {API_REPS} GETs of each of {len(endpoints)} endpoints, interleaved, plus the first event of GET /runs?follow=true&limit=200")
api = {k: [] for k in endpoints}
api["runs_follow_200_first_event"] = []
for rep in range(API_REPS):
    for key, path in endpoints.items():
        t = time.perf_counter()
        status, _ = request("GET", path, VIEWER)
        api[key].append(time.perf_counter() - t)
        assert status == 200
    t = time.perf_counter()
    first_sse_event("/runs?follow=true&limit=200", VIEWER)
    api["runs_follow_200_first_event"].append(time.perf_counter() - t)

# --- the CLI, reading the registry in-process ----------------------------------------------------
log(f"CLI: `cairn runs --limit N --json` x {CLI_REPS} for N = {LIST}, 50 (whole command)")
cli = {"cli_runs_max": [], "cli_runs_50": [], "cli_version": []}
for rep in range(CLI_REPS + 1):
    for key, args in (("cli_runs_max", ["runs", "--limit", str(LIST), "--json"]),
                      ("cli_runs_50", ["runs", "--limit", "50", "--json"]),
                      ("cli_version", ["--version"])):
        t = time.perf_counter()
        p = subprocess.run([CAIRN, *args], capture_output=True, check=True)
        took = time.perf_counter() - t
        if rep > 0:
            cli[key].append(took)
        if key != "cli_version" and rep == 0:
            n = len(json.loads(p.stdout)["runs"])
            assert n == min(int(args[2]), RUNS), (args, n)

json.dump({"runs": RUNS, "planned": PLANNED, "list": LIST, "run_id": RUN_ID, "fill_submit_s": submitted, "fill_all_ready_s": filled,
           "sizes_bytes": sizes, "api_s": api, "cli_s": cli}, open(f"{OUT}/api-samples.json", "w"), indent=1)
PY

if [ "$BROWSER" = 1 ]; then
  "$CAIRN" ui --no-open --json > "$OUT/ui.json"
  LOGIN_URL=$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["login_url"])' "$OUT/ui.json")
  log "browser: ${LOGIN_URL%%#*} (chromium, ${BENCH_PAGE_REPS:-10} loads per page and way)"
  CAIRN_LOGIN_URL=$LOGIN_URL CAIRN_RUN_ID=$(cat "$OUT/run-id") BENCH_OUT=$OUT node "$E2E/bench.mjs"
fi

LOAD_AFTER=$(uptime)
log "load after: $LOAD_AFTER"
BENCH_OUT=$OUT BENCH_LOAD_BEFORE=$LOAD_BEFORE BENCH_LOAD_AFTER=$LOAD_AFTER BENCH_STARTED=$STARTED \
  BENCH_REV=$(git rev-parse --short HEAD)$(git diff --quiet HEAD -- crates 2>/dev/null || echo '+dirty') python3 - <<'PY'
"""The report: medians and p95 of the raw samples."""
import json, os, platform, statistics, time

OUT = os.environ["BENCH_OUT"]
A = json.load(open(f"{OUT}/api-samples.json"))
B = json.load(open(f"{OUT}/browser-samples.json")) if os.path.exists(f"{OUT}/browser-samples.json") else None
RUNS, LIST = A["runs"], A["list"]


def pct(xs, p):
    s = sorted(xs)
    return s[round((len(s) - 1) * p)]


def row(label, xs, scale=1000.0, size=None):
    ms = [x * scale for x in xs]
    extra = f" | {size / 1024:.1f} KiB" if size is not None else " | —"
    return f"| {label} | {len(ms)} | {statistics.median(ms):.2f} ms | {pct(ms, 0.95):.2f} ms | {min(ms):.2f} | {max(ms):.2f}{extra} |"


cpu = next((l.split(":", 1)[1].strip() for l in open("/proc/cpuinfo") if l.startswith("model name")), "?")
print(f"\n## Machine\n\nnproc {os.cpu_count()}; {cpu}; {platform.system()} {platform.release()}; cairn {os.environ['BENCH_REV']}")
print(f"load before: {os.environ['BENCH_LOAD_BEFORE'].strip()}")
print(f"load after:  {os.environ['BENCH_LOAD_AFTER'].strip()}")
print(f"\nRegistry: {RUNS} finished 1-step runs{', every other one made through a plan (a reservation each)' if A.get('planned') else ''}, submitted in {A['fill_submit_s']:.1f} s (all READY after {A['fill_all_ready_s']:.1f} s)")

api, sz = A["api_s"], A["sizes_bytes"]
n = len(api["runs_50"])
print(f"\n## API (Viewer token, a new connection per request, {n} each, interleaved)\n")
print("| request | n | median | p95 | min | max | body |")
print("|---|---:|---:|---:|---:|---:|---:|")
for key, label in (("runs_max", f"GET /runs?limit={LIST}"), ("runs_200", "GET /runs?limit=200"), ("runs_50", "GET /runs?limit=50"),
                   ("runs_follow_200_first_event", "GET /runs?follow=true&limit=200 → first event"),
                   ("run", "GET /runs/{id}"), ("events", "GET /runs/{id}/events"),
                   ("workflow", "GET /workflows/{name}?version="), ("health", "GET /health (no token, no database)")):
    print(row(label, api[key], size=sz.get(key)))
cli = A["cli_s"]
print(f"\n## CLI, reading the registry in-process (whole command, {len(cli['cli_runs_50'])} each)\n")
print("| command | n | median | p95 | min | max | |")
print("|---|---:|---:|---:|---:|---:|---|")
print(row(f"cairn runs --limit {LIST} --json", cli["cli_runs_max"]))
print(row("cairn runs --limit 50 --json", cli["cli_runs_50"]))
print(row("cairn --version (process floor)", cli["cli_version"]))
m = lambda xs: statistics.median(xs) * 1000
if LIST > 50:
    per_run_api = (m(api["runs_max"]) - m(api["runs_50"])) / (LIST - 50) * 1000
    per_run_cli = (m(cli["cli_runs_max"]) - m(cli["cli_runs_50"])) / (LIST - 50) * 1000
    print(f"\nPer run listed (median difference limit={LIST} − limit=50, ÷ {LIST - 50}): API {per_run_api:.1f} µs, CLI {per_run_cli:.1f} µs")

if B:
    s = B["samples"]
    print(f"\n## Browser (chromium headless, one tab; median over {len(s['runs_hash_ms'])} loads after one warm-up)\n")
    print(f"The Runs page shows {B['runs_rows']} rows; the run's page {B['run_steps']} step(s). "
          f"Login link → Runs loaded: {B['login']['wall_ms']:.0f} ms.\n")
    print("| page → main[data-loaded=true] | way | n | median | p95 | min | max |")
    print("|---|---|---:|---:|---:|---:|---:|")
    for key, page, way in (("runs_hash_ms", "Runs (`#/runs`, asks for 200 runs)", "`location.hash`, in-page"),
                           ("runs_reload_ms", "Runs", "full reload, from navigation start"),
                           ("runs_reload_wall_ms", "Runs", "full reload, playwright wall time"),
                           ("run_hash_ms", "one run (`#/runs/{id}`)", "`location.hash`, in-page"),
                           ("run_reload_ms", "one run", "full reload, from navigation start"),
                           ("run_reload_wall_ms", "one run", "full reload, playwright wall time")):
        xs = s[key]
        print(f"| {page} | {way} | {len(xs)} | {statistics.median(xs):.1f} ms | {pct(xs, 0.95):.1f} ms | {min(xs):.1f} | {max(xs):.1f} |")
    print("\nA full reload, split (medians, ms since the navigation started; from the browser's navigation and resource timing):\n")
    print("| page | HTML received | DOMContentLoaded (modules run) | API requests: start → end | data-loaded |")
    print("|---|---:|---:|---|---:|")
    for key, label in (("runs_reload", "Runs"), ("run_reload", "one run")):
        parts = B["breakdown"][key]
        med = lambda f: statistics.median(f(p) for p in parts)
        api_spans = []
        for name in sorted({r["name"] for p in parts for r in p["resources"] if r["type"] == "fetch"}):
            starts = [r["start"] for p in parts for r in p["resources"] if r["name"] == name]
            ends = [r["end"] for p in parts for r in p["resources"] if r["name"] == name]
            api_spans.append(f"`{name}` {statistics.median(starts):.0f} → {statistics.median(ends):.0f}")
        print(f"| {label} | {med(lambda p: p['response_end']):.0f} | {med(lambda p: p['dom_content_loaded']):.0f} | "
              f"{'; '.join(api_spans)} | {statistics.median(s[key + '_ms']):.0f} |")
    if B["page_errors"]:
        print(f"\nPage errors: {B['page_errors']}")
print(f"\nRaw samples: {OUT}; the script took {time.time() - int(os.environ['BENCH_STARTED']):.0f} s")
PY
