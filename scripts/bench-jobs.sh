#!/usr/bin/env bash
# What recording every job of a pipeline costs: a 1,000-job Snakemake pipeline under Cairn (each
# job's start, reason and files in its events, its outputs hashed when it ends) and under plain
# `snakemake`. See BENCHMARKS.md §15.
#
#   scripts/bench-jobs.sh
#
# The pipeline (generated here): 999 `make` jobs (each writes one small file of its wildcard), a
# `gather` job over them and `all`: 1,001 jobs as Snakemake counts them.
# Measured, interleaved, medians:
#   plain   `snakemake --cores 2` in a fresh copy of the folder
#   cairn   `cairn run jobs-bench --input {} --json` through a warm daemon
# The recording is the daemon's own work while the run goes on: following the log, hashing each
# finished job's outputs, appending its events (the daemon's CPU time, from /proc, over the run's
# wall time is its share; the tools and Snakemake are other processes). Each Cairn run is checked:
# READY, and `cairn jobs` lists every job finished.
#
# Settings (environment):
#   BENCH_REPS=3        timed rounds (each: one plain, one cairn)
#   BENCH_JOBS=999      `make` jobs
#   BENCH_TMP=/tmp      where the scratch folder and the CAIRN_HOME are made
#   BENCH_OUT=bench-out/jobs-<time>   raw outputs
#   CARGO_TARGET_DIR    honoured by the build; the binary is $CARGO_TARGET_DIR/release/cairn
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$(pwd)

REPS=${BENCH_REPS:-3}
JOBS=${BENCH_JOBS:-999}
TMPBASE=${BENCH_TMP:-/tmp}
OUT=${BENCH_OUT:-$ROOT/bench-out/jobs-$(date +%Y%m%dT%H%M%S)}
CAIRN=${CARGO_TARGET_DIR:-$ROOT/target}/release/cairn

log() { printf '==> %s\n' "$*" >&2; }
now() { echo "$EPOCHREALTIME"; }

[ -x "$ROOT/.venv/bin/snakemake" ] || { log "no snakemake in .venv: run scripts/test.sh first"; exit 1; }
command -v jq > /dev/null || { log "no jq: apt-get install jq"; exit 1; }
export PATH=$ROOT/.venv/bin:$PATH

mkdir -p "$OUT"
log "raw outputs in $OUT"
log "cargo build --release"
cargo build --release -q
log "commit $(git describe --always --dirty 2>/dev/null || echo '(not a git checkout)'); snakemake $(snakemake --version)"
log "machine: $(nproc) CPUs, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2-), kernel $(uname -r)"
log "load before: $(uptime)"

WORK=$(mktemp -d -p "$TMPBASE" cairn-bench-jobs.XXXXXX)
export CAIRN_HOME=$WORK/home CAIRN_QUIET_DAEMON=1
unset XDG_STATE_HOME
cleanup() {
  "$CAIRN" daemon stop --json > /dev/null 2>&1 || true
  rm -rf "$WORK"
}
trap cleanup EXIT

P=$WORK/pipeline
mkdir -p "$P"
cat > "$P/Snakefile" <<EOF
N = $JOBS


rule all:
    input:
        "gathered.txt",


rule make:
    output:
        "parts/{i}.txt",
    shell:
        "echo {wildcards.i} > {output}"


rule gather:
    input:
        expand("parts/{i}.txt", i=range(N)),
    output:
        "gathered.txt",
    shell:
        "cat {input} > {output}"
EOF
cat > "$P/workflow.toml" <<'EOF'
[workflow]
name = "jobs-bench"
version = "1.0.0"
description = "A 1,000-job Snakemake pipeline, for scripts/bench-jobs.sh"

[tools.pipeline]
kind = "snakemake"
timeout_secs = 3600

[[steps]]
id = "pipeline"
tool = "pipeline"
args = { snakefile = "Snakefile", cores = 2 }
EOF
echo '{}' > "$WORK/input.json"

"$CAIRN" workflow add "$P" --json > "$OUT/workflow-add.json"
"$CAIRN" daemon start --json > "$OUT/daemon-start.json"
DAEMON_PID=$(jq -r .pid "$OUT/daemon-start.json")
daemon_cpu() { awk '{ print $14 + $15 }' "/proc/$DAEMON_PID/stat"; }

plain_once() { # label
  local dir=$WORK/plain-$1 t0 t1
  cp -a "$P" "$dir"
  t0=$(now)
  (cd "$dir" && snakemake --cores 2 --nocolor > "$OUT/$1.plain.log" 2>&1)
  t1=$(now)
  echo "$t0 $t1" > "$OUT/$1.plain.time"
  rm -rf "$dir"
}

cairn_once() { # label
  local t0 t1 c0 c1 run
  c0=$(daemon_cpu)
  t0=$(now)
  "$CAIRN" run jobs-bench --input "$WORK/input.json" --json > "$OUT/$1.run.json"
  t1=$(now)
  c1=$(daemon_cpu)
  echo "$t0 $t1" > "$OUT/$1.cairn.time"
  echo "$(((c1 - c0) * 1000 / $(getconf CLK_TCK)))" > "$OUT/$1.daemon-cpu-ms"
  run=$(jq -r .run_id "$OUT/$1.run.json")
  [ "$(jq -r .status "$OUT/$1.run.json")" = READY ] || { log "run $run is not READY"; exit 1; }
  "$CAIRN" jobs "$run" pipeline --json > "$OUT/$1.jobs.json"
  jq -e --argjson n "$((JOBS + 2))" '.total == $n and ([.jobs[] | select(.status == "finished")] | length) == $n' \
    "$OUT/$1.jobs.json" > /dev/null || { log "run $run: not every job is recorded finished"; exit 1; }
  jq '.duration_s' "$(jq -r .run_dir "$OUT/$1.run.json")/steps/pipeline/.cairn/attempt-1/exit.json" > "$OUT/$1.snakemake-in-cairn.s"
}

for ((rep = 1; rep <= REPS; rep++)); do
  log "round $rep/$REPS"
  if ((rep % 2)); then plain_once "r$rep"; cairn_once "r$rep"; else cairn_once "r$rep"; plain_once "r$rep"; fi
done
log "load after: $(uptime)"

python3 - "$OUT" "$REPS" "$((JOBS + 2))" <<'EOF'
import json, statistics, sys
out, reps, jobs = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
def secs(f):
    a, b = open(f).read().split()
    return float(b) - float(a)
rows = [{
    "plain_s": secs(f"{out}/r{r}.plain.time"),
    "cairn_s": secs(f"{out}/r{r}.cairn.time"),
    "snakemake_in_cairn_s": float(open(f"{out}/r{r}.snakemake-in-cairn.s").read()),
    "daemon_cpu_s": int(open(f"{out}/r{r}.daemon-cpu-ms").read()) / 1000,
} for r in range(1, reps + 1)]
print(json.dumps(rows, indent=1))
med = lambda k: statistics.median(x[k] for x in rows)
p, c, s, cpu = med("plain_s"), med("cairn_s"), med("snakemake_in_cairn_s"), med("daemon_cpu_s")
print(f"{jobs} jobs, medians of {reps}: plain snakemake {p:.1f} s; cairn run {c:.1f} s (Snakemake inside it {s:.1f} s), "
      f"cairn / plain = {c / p:.3f}x")
print(f"the daemon's own CPU (following the log, hashing each job's outputs, recording its events): {cpu:.2f} s "
      f"= {100 * cpu / c:.2f} % of the run's wall time, {1000 * cpu / jobs:.2f} ms a job; target < 2 % -> "
      f"{'met' if cpu / c < 0.02 else 'NOT met'}")
EOF
