#!/usr/bin/env bash
# A huge run through the daemon, as a user makes one: a fan-out of N `/bin/echo` steps and a join,
# `cairn run --parallel 2` following it. Reports the run's time, the daemon's and the follower's
# peak memory, and how long each surface takes to answer for the finished run; then the web app's
# page of that run timed in a browser; then the largest DAG of the same shape Snakemake runs in the
# time Cairn's run took. See BENCHMARKS.md §17 for what each figure means and the results on record.
#
#   scripts/bench-scale.sh                  # 100,000 steps
#   BENCH_STEPS=1000000 BENCH_SNAKEMAKE=0 scripts/bench-scale.sh
#
# Settings (environment):
#   BENCH_STEPS=100000    roots of the fan-out (one join step needs them all)
#   BENCH_PARALLEL=2      --parallel of the run, --cores of Snakemake's
#   BENCH_REPS=5          timed repetitions of each surface's answer and of the browser's page load
#                         (median reported)
#   BENCH_TMP=/tmp        where the state root and Snakemake's directories are made
#   BENCH_OUT=bench-out/scale-<time>   where raw outputs are kept
#   BENCH_CAIRN=PATH      the cairn binary (default: this checkout's release build, built first)
#   BENCH_BROWSER=1       the run's page in the web app (`#/runs/{id}`), loaded BENCH_REPS times in
#                         Debian's chromium, headless, through playwright-core
#                         (tools/webapp-e2e/bench-large-run.mjs): the time from the navigation's
#                         start until it is usable (the step counts, the layers and the virtualized
#                         table's first rows drawn), its JS heap and the bytes it transferred; fails
#                         if the page is not usable within 30 s, or is not the large-run page (a
#                         run of at most 1,000 steps is shown whole). 0 skips it (it needs
#                         /usr/bin/chromium and `npm ci` in tools/webapp-e2e/)
#   BENCH_SNAKEMAKE=1     Snakemake on the same shape (N jobs of `/bin/echo {} > out/r{i}.txt`, one
#                         wildcard rule, and a join needing them all), `--cores BENCH_PARALLEL`,
#                         the daemon stopped: N from BENCH_SNAKEMAKE_START, doubled while a run
#                         finishes within the budget (halved while none has), then once 1.5× the
#                         largest that did; each N's wall time, peak RSS and `--dry-run` time (its
#                         DAG). The budget is Cairn's run time from this same script run; a run
#                         past it is stopped (timeout). 0 skips it
#   BENCH_SNAKEMAKE_BIN=.venv/bin/snakemake   the Snakemake (scripts/requirements-test.txt pins it)
#   BENCH_SNAKEMAKE_START=1000   the first N tried (100 when the budget is under 60 s)
#   BENCH_SNAKEMAKE_BUDGET=      seconds; overrides the budget (default: Cairn's run time)
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$(pwd)

STEPS=${BENCH_STEPS:-100000}
PAR=${BENCH_PARALLEL:-2}
REPS=${BENCH_REPS:-5}
TMPBASE=${BENCH_TMP:-/tmp}
OUT=${BENCH_OUT:-$ROOT/bench-out/scale-$(date +%Y%m%dT%H%M%S)}
CAIRN=${BENCH_CAIRN:-}
BROWSER=${BENCH_BROWSER:-1}
E2E=$ROOT/tools/webapp-e2e
SNAKE=${BENCH_SNAKEMAKE:-1}
SNAKEMAKE=${BENCH_SNAKEMAKE_BIN:-$ROOT/.venv/bin/snakemake}

log() { printf '==> %s\n' "$*" >&2; }
command -v jq > /dev/null || { echo "bench-scale needs jq" >&2; exit 2; }
command -v curl > /dev/null || { echo "bench-scale needs curl" >&2; exit 2; }
[ -x /usr/bin/time ] || { echo "bench-scale needs /usr/bin/time (Debian's time package) for peak memory" >&2; exit 2; }
# The optional phases' needs are checked before the long run, not after it.
if [ "$BROWSER" = 1 ]; then
  [ -x /usr/bin/chromium ] || { echo "no /usr/bin/chromium (apt-get install --no-install-recommends chromium, or BENCH_BROWSER=0)" >&2; exit 2; }
  command -v node > /dev/null || { echo "no node (apt-get install nodejs, or BENCH_BROWSER=0)" >&2; exit 2; }
  [ -d "$E2E/node_modules/playwright-core" ] || { echo "no playwright-core in $E2E (npm ci there, or BENCH_BROWSER=0)" >&2; exit 2; }
fi
if [ "$SNAKE" = 1 ]; then
  [ -x "$SNAKEMAKE" ] || { echo "no snakemake at $SNAKEMAKE (pip install -r scripts/requirements-test.txt into .venv, set BENCH_SNAKEMAKE_BIN, or BENCH_SNAKEMAKE=0)" >&2; exit 2; }
  command -v timeout > /dev/null || { echo "bench-scale needs timeout (coreutils) for Snakemake's budget" >&2; exit 2; }
fi

mkdir -p "$OUT"
log "raw outputs in $OUT"
if [ -z "$CAIRN" ]; then
  log "cargo build --release"
  cargo build --release -q
  CAIRN=$ROOT/target/release/cairn
fi

WORK=$(mktemp -d -p "$TMPBASE" cairn-scale.XXXXXX)
export CAIRN_HOME=$WORK/state
SAMPLER=
cleanup() {
  [ -z "$SAMPLER" ] || kill "$SAMPLER" 2> /dev/null || true
  "$CAIRN" daemon stop > /dev/null 2>&1 || true
  rm -rf "$WORK"
}
trap cleanup EXIT

log "generating a fan-out of $STEPS steps and a join"
mkdir -p "$WORK/wf"
python3 - "$WORK/wf/workflow.toml" "$STEPS" << 'EOF'
import sys
path, n = sys.argv[1], int(sys.argv[2])
with open(path, "w") as f:
    f.write('[workflow]\nname = "scale"\nversion = "1.0.0"\n\n[tools.echo]\ncommand = ["/bin/echo", "{}"]\n\n')
    for i in range(n):
        f.write(f'[[steps]]\nid = "r{i}"\ntool = "echo"\n\n')
    f.write('[[steps]]\nid = "join"\ntool = "echo"\nneeds = [' + ", ".join(f'"r{i}"' for i in range(n)) + "]\n")
EOF
echo '{}' > "$WORK/input.json"

# `label seconds peak-KiB` of a command, its stdout to a file.
timed() { # label out-file cmd...
  local label=$1 file=$2
  shift 2
  /usr/bin/time -f "%e %M" -o "$OUT/$label.time" "$@" > "$file"
  echo "$label $(cat "$OUT/$label.time")" >> "$OUT/timed.txt"
}

timed workflow-add "$OUT/workflow-add.json" "$CAIRN" workflow add "$WORK/wf" --json
"$CAIRN" daemon start > "$OUT/daemon.txt"
DAEMON_PID=$(jq -r .pid "$CAIRN_HOME/daemon.json")
URL=$(jq -r .url "$CAIRN_HOME/daemon.json")
TOKEN=$(cat "$CAIRN_HOME/auth/viewer.token")
log "daemon $DAEMON_PID at $URL"
(while [ -e "/proc/$DAEMON_PID" ]; do
  awk -v t="$EPOCHREALTIME" '/VmRSS/ {print t, $2}' "/proc/$DAEMON_PID/status" 2> /dev/null || true
  sleep 0.2
done) > "$OUT/daemon-rss.txt" &
SAMPLER=$!

log "cairn run scale --parallel $PAR ($STEPS + 1 steps)"
timed run "$OUT/run.json" "$CAIRN" run scale --input "$WORK/input.json" --parallel "$PAR" --json
RUN_ID=$(jq -r .run_id "$OUT/run.json")
STATUS=$(jq -r .status "$OUT/run.json")
[ "$STATUS" = READY ] || { log "the run ended $STATUS"; exit 1; }
DAEMON_RUN_PEAK=$(awk 'BEGIN {m = 0} $2 > m {m = $2} END {print m}' "$OUT/daemon-rss.txt")

median() { sort -n | awk '{a[NR] = $1} END {print a[int((NR + 1) / 2)]}'; }

# The median seconds and the bytes of REPS answers of a GET.
file_of() { echo "$OUT/surface-$(echo "$1" | tr -c 'A-Za-z0-9\n' '_')"; }

surface_get() { # label path
  local label=$1 path=$2 i f
  f=$(file_of "$label")
  for ((i = 0; i < REPS; i++)); do
    curl -s -o "$f.body" -w '%{time_total} %{size_download}\n' -H "Authorization: Bearer $TOKEN" "$URL$path"
  done > "$f.curl"
  echo "$label: $(awk '{print $1}' "$f.curl" | median) s, $(tail -1 "$f.curl" | awk '{print $2}') bytes"
}

# The median seconds of REPS runs of a CLI command, with its stdout's bytes.
surface_cli() { # label args...
  local label=$1 i t0 t1 f
  f=$(file_of "$label")
  shift
  for ((i = 0; i < REPS; i++)); do
    t0=$EPOCHREALTIME
    "$CAIRN" "$@" > "$f.out"
    t1=$EPOCHREALTIME
    echo "$t0 $t1" | awk '{print $2 - $1}'
  done > "$f.secs"
  echo "$label: $(median < "$f.secs") s, $(wc -c < "$f.out") bytes"
}

log "each surface's answer for the finished run (median of $REPS)"
{
  surface_get "GET /runs/{id}" "/runs/$RUN_ID"
  surface_get "GET /runs/{id}?steps_offset=$((STEPS / 2))&steps_limit=100" "/runs/$RUN_ID?steps_offset=$((STEPS / 2))&steps_limit=100"
  surface_get "GET /runs/{id}?steps_status=FAILED,RUNNING" "/runs/$RUN_ID?steps_status=FAILED,RUNNING"
  surface_get "GET /runs/{id}/timeline" "/runs/$RUN_ID/timeline"
  surface_get "GET /runs/{id}/layers" "/runs/$RUN_ID/layers"
  surface_get "GET /runs/{id}/events?limit=200&newest=true" "/runs/$RUN_ID/events?limit=200&newest=true"
  surface_cli "cairn show --json" show "$RUN_ID" --json
  surface_cli "cairn show" show "$RUN_ID"
} | tee "$OUT/surfaces.txt" >&2

timed show-json "$OUT/show.json" "$CAIRN" show "$RUN_ID" --json
DAEMON_HWM=$(awk '/VmHWM/ {print $2}' "/proc/$DAEMON_PID/status")
read -r _ SHOW_S SHOW_KIB < <(grep '^show-json ' "$OUT/timed.txt")
read -r _ RUN_S RUN_KIB < <(grep '^run ' "$OUT/timed.txt")
read -r _ ADD_S ADD_KIB < <(grep '^workflow-add ' "$OUT/timed.txt")
{
  echo "steps: $((STEPS + 1)) (a fan-out of $STEPS and a join), --parallel $PAR"
  echo "workflow add: ${ADD_S} s, peak ${ADD_KIB} KiB"
  echo "run: ${RUN_S} s ($(awk -v s="$RUN_S" -v n="$STEPS" 'BEGIN {printf "%.3f", s * 1000 / (n + 1)}') ms a step)"
  echo "daemon peak RSS while it ran (sampled every 0.2 s): ${DAEMON_RUN_PEAK} KiB; VmHWM after the surfaces: ${DAEMON_HWM} KiB"
  echo "follower (cairn run) peak RSS: ${RUN_KIB} KiB; cairn show --json: ${SHOW_KIB} KiB"
  echo "each surface's answer for the finished run (median of $REPS):"
  sed 's/^/  /' "$OUT/surfaces.txt"
} | tee "$OUT/summary.txt"

if [ "$BROWSER" = 1 ]; then
  "$CAIRN" ui --no-open --json > "$OUT/ui.json"
  LOGIN_URL=$(jq -r .login_url "$OUT/ui.json")
  log "the run's page in chromium (headless), $REPS full loads"
  CAIRN_LOGIN_URL=$LOGIN_URL CAIRN_RUN_ID=$RUN_ID CAIRN_STEPS=$((STEPS + 1)) BENCH_PAGE_REPS=$REPS BENCH_OUT=$OUT \
    node "$E2E/bench-large-run.mjs" > "$OUT/browser.out" 2> "$OUT/browser.log" || {
    tail -20 "$OUT/browser.log" >&2
    log "the browser phase failed (its log: $OUT/browser.log)"
    exit 1
  }
  DAEMON_HWM_BROWSER=$(awk '/VmHWM/ {print $2}' "/proc/$DAEMON_PID/status")
  jq -r --arg reps "$REPS" --arg hwm "$DAEMON_HWM_BROWSER" '
    def med: sort | .[(length - 1) / 2 | floor];
    def ms: . * 10 | round / 10;
    def line($k): [.samples[][$k]] | "\(med | ms) ms (min \(min | ms), max \(max | ms))";
    "web app, the run'"'"'s page in chromium headless (a full load at #/runs/{id}, median of \($reps)):",
    "  usable (step counts, \(.shown.layers) layers, the first \(.shown.rows) rows of the virtualized table), from navigation start: \(line("usable_ms"))",
    "  everything drawn (data-loaded: the attempts'"'"' time axis and the newest events too): \(line("loaded_ms"))",
    "  playwright wall time, reload → usable: \(line("wall_ms")); in the app the first time (location.hash from Runs): \(.first_hash_ms | ms) ms",
    "  JS heap used after a load: \([.samples[].js_heap_used_bytes] | med / 1048576 * 10 | round / 10) MiB; transferred by a load: \([.samples[].transfer_bytes] | med) bytes (API bodies \([.samples[].api_body_bytes] | med) bytes in \(.samples[0].api_requests | length) requests)",
    "  daemon VmHWM after the page loads: \($hwm) KiB\(if (.page_errors | length) > 0 then "; page errors: \(.page_errors | join("; "))" else "" end)"
  ' "$OUT/browser-large-run.json" | tee -a "$OUT/summary.txt"
fi

if [ "$SNAKE" = 1 ]; then
  # The machine to itself: the daemon's part is over.
  "$CAIRN" daemon stop > /dev/null 2>&1 || true
  BUDGET=${BENCH_SNAKEMAKE_BUDGET:-$RUN_S}
  if [ -n "${BENCH_SNAKEMAKE_START:-}" ]; then
    START=$BENCH_SNAKEMAKE_START
  elif awk -v b="$BUDGET" 'BEGIN {exit !(b < 60)}'; then
    START=100
  else
    START=1000
  fi
  log "snakemake $("$SNAKEMAKE" --version): the largest fan-out + join it runs with --cores $PAR within ${BUDGET} s"
  # The idiomatic fan-out, as in scripts/bench-engine.sh: one rule with a wildcard, one job per
  # root, and a join; N comes from --config, so one Snakefile serves every try.
  cat > "$WORK/Snakefile" << 'EOF'
N = int(config["roots"])

rule all:
    input: "out/join.txt"

rule join:
    input: expand("out/r{i}.txt", i=range(N))
    output: "out/join.txt"
    shell: "/bin/echo {{}} > {output}"

rule root:
    output: "out/r{i}.txt"
    shell: "/bin/echo {{}} > {output}"
EOF
  cp "$WORK/Snakefile" "$OUT/Snakefile"
  : > "$OUT/snakemake-tries.txt"

  # `seconds peak-KiB` of a command stopped at the budget, into FILE; its status returned.
  budgeted() { # file cmd...
    local file=$1 rc=0
    shift
    /usr/bin/time -f "%e %M" -o "$file" timeout -k 5 "$BUDGET" "$@" || rc=$?
    # /usr/bin/time writes "Command exited with non-zero status …" first when the command fails.
    tail -1 "$file" > "$file.tmp" && mv "$file.tmp" "$file"
    return "$rc"
  }

  # One N: its DAG (`--dry-run`), then the real run. Appends `N ok|over|error run-s peak-KiB dag-s`
  # to snakemake-tries.txt; returns 0 when the run finished within the budget.
  snake_try() { # n
    local n=$1 dir=$WORK/snake-$1 rc=0 dag_s run_s run_kib made
    rm -rf "$dir"
    mkdir -p "$dir"
    cp "$WORK/Snakefile" "$dir/Snakefile"
    (cd "$dir" && budgeted "$OUT/snakemake-$n.dry.time" "$SNAKEMAKE" --cores "$PAR" --config roots="$n" --dry-run --quiet \
      > "$OUT/snakemake-$n.dry.log" 2>&1) || rc=$?
    read -r dag_s _ < "$OUT/snakemake-$n.dry.time"
    if [ "$rc" = 124 ] || [ "$rc" = 137 ]; then
      log "N=$n: building its DAG (--dry-run) took over the budget; not run"
      echo "$n over $dag_s - $dag_s" >> "$OUT/snakemake-tries.txt"
      rm -rf "$dir"
      return 1
    elif [ "$rc" != 0 ]; then
      tail -5 "$OUT/snakemake-$n.dry.log" >&2
      log "N=$n: snakemake --dry-run exited $rc (its log: $OUT/snakemake-$n.dry.log)"
      exit 1
    fi
    rm -rf "$dir/.snakemake"
    (cd "$dir" && budgeted "$OUT/snakemake-$n.time" "$SNAKEMAKE" --cores "$PAR" --config roots="$n" --quiet \
      > "$OUT/snakemake-$n.log" 2>&1) || rc=$?
    read -r run_s run_kib < "$OUT/snakemake-$n.time"
    if [ "$rc" = 124 ] || [ "$rc" = 137 ]; then
      made=$(find "$dir/out" -name 'r*.txt' 2> /dev/null | wc -l)
      log "N=$n: over the budget, stopped (exited at ${run_s} s, $made of $n outputs made); DAG ${dag_s} s"
      echo "$n over $run_s $run_kib $dag_s" >> "$OUT/snakemake-tries.txt"
      rm -rf "$dir"
      return 1
    elif [ "$rc" != 0 ]; then
      tail -5 "$OUT/snakemake-$n.log" >&2
      log "N=$n: snakemake exited $rc (its log: $OUT/snakemake-$n.log)"
      exit 1
    fi
    made=$(find "$dir/out" -name 'r*.txt' | wc -l)
    [ "$made" = "$n" ] && [ "$(cat "$dir/out/join.txt")" = "{}" ] || {
      log "N=$n: snakemake exited 0 but made $made of $n outputs (or no join)"
      exit 1
    }
    log "N=$n: ${run_s} s, peak ${run_kib} KiB; DAG (--dry-run) ${dag_s} s"
    echo "$n ok $run_s $run_kib $dag_s" >> "$OUT/snakemake-tries.txt"
    rm -rf "$dir"
  }

  # Doubled while every run finishes, halved while none has; then once between the largest that
  # finished and the smallest that did not.
  LO=0 HI=0 N=$START
  while :; do
    if snake_try "$N"; then LO=$N; else HI=$N; fi
    if [ "$HI" = 0 ]; then
      N=$((N * 2))
    elif [ "$LO" = 0 ] && [ "$N" -gt 1 ]; then
      N=$((N / 2))
    else
      break
    fi
  done
  if [ "$LO" -gt 0 ] && [ $((HI - LO)) -gt 1 ]; then
    N=$(((LO + HI) / 2))
    if snake_try "$N"; then LO=$N; fi
  fi
  {
    echo "Snakemake $("$SNAKEMAKE" --version) on the same shape (N jobs of /bin/echo into a file each, and a join), --cores $PAR, within ${BUDGET} s (the run's time above):"
    sort -n "$OUT/snakemake-tries.txt" | awk '
      $4 == "-" { printf "  N=%d: its DAG alone (--dry-run) over the budget (it exited at %s s)\n", $1, $5; next }
      { printf "  N=%d: %s, peak RSS %s KiB; DAG (--dry-run, start-up included) %s s\n", $1,
          $2 == "ok" ? $3 " s" : "over the budget (stopped at it, exited at " $3 " s)", $4, $5 }'
    if [ "$LO" -gt 0 ]; then
      read -r _ _ LO_S LO_KIB _ < <(awk -v n="$LO" '$1 == n' "$OUT/snakemake-tries.txt")
      echo "  the largest that finished: $((LO + 1)) jobs ($LO and a join) in ${LO_S} s ($(awk -v s="$LO_S" -v n="$LO" 'BEGIN {printf "%.1f", s * 1000 / (n + 1)}') ms a job), peak RSS ${LO_KIB} KiB;" \
        "Cairn: $((STEPS + 1)) steps in ${RUN_S} s, $(awk -v c="$STEPS" -v s="$LO" 'BEGIN {printf "%.1f", (c + 1) / (s + 1)}')× as many"
    else
      echo "  none finished: Snakemake ran no DAG of this shape within ${BUDGET} s"
    fi
  } | tee -a "$OUT/summary.txt"
fi

# The key figures as rows for BENCHMARKS.md's summary table:
#   scripts/bench-table.py --record "$OUT/results.json" && scripts/bench-table.py --write
python3 - "$OUT" "$STEPS" "$PAR" "$REPS" "$RUN_S" "$RUN_KIB" "$DAEMON_RUN_PEAK" "$DAEMON_HWM" "$BROWSER" "$SNAKE" \
  "${LO:-0}" "${BUDGET:-}" << 'EOF_RESULTS'
import json, os, platform, statistics, subprocess, sys, time
out, steps, par, reps, run_s, run_kib, peak_kib, hwm_kib, browser, snake, lo, budget = sys.argv[1:]
steps, lo, run_s = int(steps), int(lo), float(run_s)
cpu = {k.strip(): v.strip() for k, v in (l.split(":", 1) for l in open("/proc/cpuinfo").read().split("\n\n")[0].splitlines() if ":" in l)}
machine = (f"{os.cpu_count()} vCPUs, {cpu['model name']} family {cpu['cpu family']} "
           f"model {cpu['model']}, kernel {platform.release()}")
size = f"{steps // 10**6}m" if steps % 10**6 == 0 else f"{steps // 1000}k" if steps % 1000 == 0 else str(steps)
shape = f"a {steps:,}-step fan-out + join of `/bin/echo` through the daemon, `cairn run --parallel {par}`"
fig = lambda value, unit: {"value": value, "unit": unit}
rows = [
    {"id": f"scale.run_{size}", "benchmark": f"{shape}: the run", "target": None,
     "measured": "{run_s:g} s ({step_ms:.2f} ms a step)",
     "figures": {"run_s": fig(run_s, "s"), "step_ms": fig(round(run_s * 1000 / (steps + 1), 3), "ms")}, "met": None},
    {"id": f"scale.memory_{size}", "benchmark": f"{shape}: the daemon's / the follower's (`cairn run`) peak RSS",
     "target": "< 1 GiB (the daemon)" if steps >= 10**6 else "≤ 150 MB / ≤ 30 MB" if steps == 10**5 else None,
     "measured": "{daemon_peak_mib:.1f} / {follower_peak_mib:.1f} MiB (the daemon's VmHWM after every surface {daemon_hwm_mib:.1f} MiB)",
     "figures": {"daemon_peak_mib": fig(int(peak_kib) / 1024, "MiB"), "follower_peak_mib": fig(int(run_kib) / 1024, "MiB"),
                 "daemon_hwm_mib": fig(int(hwm_kib) / 1024, "MiB")},
     "met": int(peak_kib) < 1024 * 1024 if steps >= 10**6
     else int(peak_kib) <= 150 * 1000 * 1000 / 1024 and int(run_kib) <= 30 * 1000 * 1000 / 1024 if steps == 10**5 else None},
]
# Issue 35's targets at 100,000 steps: each answer under 100 ms, the timeline under 1 s; the page under 2 s.
at_100k = steps == 10**5
names = {"GET /runs/{id}": "get_run", "GET /runs/{id}?steps_offset=": "get_run_page",
         "GET /runs/{id}?steps_status=": "get_run_failed_running", "GET /runs/{id}/timeline": "timeline",
         "GET /runs/{id}/layers": "layers", "GET /runs/{id}/events": "events_newest",
         "cairn show --json": "show_json", "cairn show": "show"}
surfaces, parts = {}, []
for line in open(f"{out}/surfaces.txt"):
    label, rest = line.rsplit(": ", 1)
    key = next(names[k] for k in sorted(names, key=len, reverse=True) if label.startswith(k))
    surfaces[f"{key}_ms"] = fig(round(float(rest.split(" s,")[0]) * 1000, 1), "ms")
    parts.append(f"`{label.replace('{', '{{').replace('}', '}}')}` {{{key}_ms:g}} ms")
rows.append({"id": f"scale.surfaces_{size}", "benchmark": f"{shape}: each surface's answer for the finished run (median of {reps})",
             "target": "< 100 ms each; the timeline < 1 s" if at_100k else None, "measured": "; ".join(parts), "figures": surfaces,
             "met": all(v["value"] < (1000 if k == "timeline_ms" else 100) for k, v in surfaces.items()) if at_100k else None})
if browser == "1":
    samples = json.load(open(f"{out}/browser-large-run.json"))["samples"]
    rows.append({"id": f"scale.browser_{size}", "benchmark": f"{shape}: the web app's page of the run in chromium (headless), "
                 f"navigation start → usable, median of {reps}", "target": "< 2 s" if at_100k else None, "measured": "{usable_ms:.0f} ms",
                 "figures": {"usable_ms": fig(statistics.median_low(s["usable_ms"] for s in samples), "ms")},
                 "met": statistics.median_low(s["usable_ms"] for s in samples) < 2000 if at_100k else None})
if snake == "1":
    row = {"id": f"scale.snakemake_{size}", "benchmark": f"Snakemake `--cores {par}` on the same shape: the largest N it runs in the time Cairn's "
           f"{steps:,}-step run took", "target": None, "met": None}
    if lo > 0:
        lo_s = next(float(l.split()[2]) for l in open(f"{out}/snakemake-tries.txt") if l.split()[:2] == [str(lo), "ok"])
        row["measured"] = "{snakemake_jobs:,} jobs in {snakemake_s:g} s; Cairn {cairn_steps:,} steps in {cairn_s:g} s, {times:.1f}× as many"
        row["figures"] = {"snakemake_jobs": fig(lo + 1, "jobs"), "snakemake_s": fig(lo_s, "s"),
                          "cairn_steps": fig(steps + 1, "steps"), "cairn_s": fig(run_s, "s"), "times": fig((steps + 1) / (lo + 1), "×")}
    else:
        row["measured"] = "none finished within {budget_s:g} s"
        row["figures"] = {"budget_s": fig(float(budget), "s")}
    rows.append(row)
commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True).stdout.strip()
json.dump({"format": 1, "family": "scale", "order": 17, "section": "17. A 100,000-step run on every surface (issue 35)",
           "command": f"scripts/bench-scale.sh  # BENCH_STEPS={steps} BENCH_PARALLEL={par} BENCH_REPS={reps}, at {commit}",
           "date": time.strftime("%Y-%m-%d", time.gmtime()), "machine": machine, "rows": rows},
          open(f"{out}/results.json", "w"), indent=2, ensure_ascii=False)
EOF_RESULTS
log "results for BENCHMARKS.md: scripts/bench-table.py --record $OUT/results.json && scripts/bench-table.py --write"
