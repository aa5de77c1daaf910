#!/usr/bin/env bash
# A huge run through the daemon, as a user makes one: a fan-out of N `/bin/echo` steps and a join,
# `cairn run --parallel 2` following it. Reports the run's time, the daemon's and the follower's
# peak memory, and how long each surface takes to answer for the finished run. See BENCHMARKS.md
# §17 for what each figure means and the results on record.
#
#   scripts/bench-scale.sh                  # 100,000 steps
#   BENCH_STEPS=1000000 scripts/bench-scale.sh
#
# Settings (environment):
#   BENCH_STEPS=100000    roots of the fan-out (one join step needs them all)
#   BENCH_PARALLEL=2      --parallel of the run
#   BENCH_REPS=5          timed repetitions of each surface's answer (median reported)
#   BENCH_TMP=/tmp        where the state root is made
#   BENCH_OUT=bench-out/scale-<time>   where raw outputs are kept
#   BENCH_CAIRN=PATH      the cairn binary (default: this checkout's release build, built first)
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$(pwd)

STEPS=${BENCH_STEPS:-100000}
PAR=${BENCH_PARALLEL:-2}
REPS=${BENCH_REPS:-5}
TMPBASE=${BENCH_TMP:-/tmp}
OUT=${BENCH_OUT:-$ROOT/bench-out/scale-$(date +%Y%m%dT%H%M%S)}
CAIRN=${BENCH_CAIRN:-}

log() { printf '==> %s\n' "$*" >&2; }
command -v jq > /dev/null || { echo "bench-scale needs jq" >&2; exit 2; }
command -v curl > /dev/null || { echo "bench-scale needs curl" >&2; exit 2; }
[ -x /usr/bin/time ] || { echo "bench-scale needs /usr/bin/time (Debian's time package) for peak memory" >&2; exit 2; }

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
DAEMON_HWM=$(awk '/VmHWM/ {print $2}' "/proc/$DAEMON_PID/status")
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
