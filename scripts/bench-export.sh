#!/usr/bin/env bash
# What exporting a run as an RO-Crate costs, end to end through the release binary. See
# BENCHMARKS.md §13.
#
#   scripts/bench-export.sh
#
# A 1,000-step run (a chain; each step writes a 1 KiB file declared as its output, so the run has
# 1,000 artifacts) is exported with `cairn export` three ways: without data (metadata, the
# workflow, the input and the verdict; the artifacts referenced by path and SHA-256), with data
# (every artifact copied and re-hashed), and as a zip with data. The peer is ro-crate-py (the
# `rocrate` package, pinned in scripts/requirements-test.txt), given the same 1,000 files and
# writing its crate with them: a crate with none of the provenance, only the files.
#
# Settings (environment):
#   BENCH_STEPS=1000  steps (and artifacts) of the run
#   BENCH_REPS=5      repetitions; medians are reported
#   BENCH_TMP=/tmp    where the fresh CAIRN_HOME is made
#   BENCH_PYTHON      a python with `rocrate` (default: .venv/bin/python)
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$(pwd)

STEPS=${BENCH_STEPS:-1000}
REPS=${BENCH_REPS:-5}
TMPBASE=${BENCH_TMP:-/tmp}
PY=${BENCH_PYTHON:-$ROOT/.venv/bin/python}
CAIRN=$ROOT/target/release/cairn

log() { printf '==> %s\n' "$*" >&2; }
now() { echo "$EPOCHREALTIME"; }
median() { sort -g | awk '{a[NR]=$1} END {print (NR % 2) ? a[(NR+1)/2] : (a[NR/2] + a[NR/2+1]) / 2}'; }

"$PY" -c 'import rocrate' 2>/dev/null || { echo "no rocrate in $PY (pip install -r scripts/requirements-test.txt)" >&2; exit 2; }
log "cargo build --release"
cargo build --release -q

WORK=$(mktemp -d -p "$TMPBASE" cairn-bench-export.XXXXXX)
trap 'rm -rf "$WORK"' EXIT
export CAIRN_HOME=$WORK/home
echo '{}' > "$WORK/input.json"

WF=$WORK/wf
mkdir -p "$WF/tools"
printf '#!/bin/sh\ncat > /dev/null\nhead -c 1024 /dev/urandom > out.bin\necho {}\n' > "$WF/tools/kib.sh"
chmod +x "$WF/tools/kib.sh"
{
  printf '[workflow]\nname = "export-bench"\nversion = "1.0.0"\n\n[tools.t]\ncommand = ["tools/kib.sh"]\noutputs = { out = "out.bin" }\n\n'
  printf '[[steps]]\nid = "s0"\ntool = "t"\n\n'
  for ((i = 1; i < STEPS; i++)); do
    printf '[[steps]]\nid = "s%d"\ntool = "t"\nneeds = ["s%d"]\n\n' "$i" "$((i - 1))"
  done
} > "$WF/workflow.toml"

"$CAIRN" workflow add "$WF" --json > /dev/null
log "running the $STEPS-step run"
"$CAIRN" run export-bench --input "$WORK/input.json" --run-id E --json > "$WORK/run.json"
"$CAIRN" daemon stop > /dev/null 2>&1 || true
artifacts=$("$CAIRN" artifacts E --json | "$PY" -c 'import json,sys; print(len(json.load(sys.stdin)["artifacts"]))')
log "run E: $artifacts artifacts"

time_export() { # label args...
  local label=$1
  shift
  local times=()
  for ((r = 1; r <= REPS; r++)); do
    rm -rf "$WORK/out" "$WORK/out.zip"
    local t0 t1
    t0=$(now)
    "$CAIRN" export E "$@" --json > "$WORK/export.json"
    t1=$(now)
    times+=("$(echo "$t1 - $t0" | bc -l)")
  done
  printf '%s\n' "${times[@]}" | median > "$WORK/$label.median"
  printf '%-28s %8.3f s  (%s)\n' "$label" "$(cat "$WORK/$label.median")" "$(tr -d '\n' < "$WORK/export.json")"
}

time_export "cairn export --no-data" --no-data --ro-crate "$WORK/out"
time_export "cairn export (data)" --ro-crate "$WORK/out"
time_export "cairn export --zip (data)" --zip "$WORK/out.zip"

# The peer: ro-crate-py writing a crate of the same 1,000 files (no provenance at all).
RUN_DIR=$("$PY" -c 'import json,sys; print(json.load(open(sys.argv[1]))["run_dir"])' "$WORK/run.json")
peer_times=()
for ((r = 1; r <= REPS; r++)); do
  rm -rf "$WORK/peer"
  t0=$(now)
  "$PY" - "$RUN_DIR" "$WORK/peer" <<'EOF'
import os, sys
from rocrate.rocrate import ROCrate
run_dir, out = sys.argv[1], sys.argv[2]
crate = ROCrate()
steps = os.path.join(run_dir, "steps")
for step in sorted(os.listdir(steps)):
    path = os.path.join(steps, step, "out.bin")
    crate.add_file(path, dest_path=f"steps/{step}/out.bin")
crate.write(out)
EOF
  t1=$(now)
  peer_times+=("$(echo "$t1 - $t0" | bc -l)")
done
printf '%s\n' "${peer_times[@]}" | median > "$WORK/peer.median"
printf '%-28s %8.3f s\n' "ro-crate-py (same files)" "$(cat "$WORK/peer.median")"
printf 'ratio ro-crate-py / cairn export (data): %.2fx\n' \
  "$(echo "$(cat "$WORK/peer.median") / $(cat "$WORK/cairn export (data).median")" | bc -l)"
