#!/usr/bin/env bash
# Engine overhead per step, end to end through the release binary, and the same chain in
# Snakemake. See BENCHMARKS.md for what each figure means and the results on record.
#
#   scripts/bench-engine.sh                # 1,000-step chain and 1,000-wide fan-in, 3 repetitions
#
# Settings (environment):
#   BENCH_STEPS=1000      steps of the chain; roots of the fan-in (plus one sink)
#   BENCH_REPS=3          repetitions; medians are reported
#   BENCH_SNAKEMAKE=1     also time the equivalent Snakemake chain (0 to skip)
#   BENCH_SNAKE_STEPS=200 rules of the Snakemake chain; if it differs from BENCH_STEPS, the Cairn
#                         chain is also run at that size for the ratio. Not 1,000: Snakemake 9.27
#                         builds its DAG recursively and a 1,000-deep chain stops with
#                         "RecursionError: maximum recursion depth exceeded" (at about depth 500)
#   BENCH_TMP=/tmp        where the fresh CAIRN_HOMEs and Snakemake directories are made
#                         (/dev/shm puts the SQLite database on tmpfs, where fsync costs nothing)
#   BENCH_OUT=bench-out/engine-<time>   where raw outputs are kept
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$(pwd)

STEPS=${BENCH_STEPS:-1000}
REPS=${BENCH_REPS:-3}
SNAKE=${BENCH_SNAKEMAKE:-1}
SNAKE_STEPS=${BENCH_SNAKE_STEPS:-200}
TMPBASE=${BENCH_TMP:-/tmp}
OUT=${BENCH_OUT:-$ROOT/bench-out/engine-$(date +%Y%m%dT%H%M%S)}
CAIRN=$ROOT/target/release/cairn

log() { printf '==> %s\n' "$*" >&2; }

mkdir -p "$OUT"
log "raw outputs in $OUT"
log "cargo build --release"
cargo build --release -q

WORK=$(mktemp -d -p "$TMPBASE" cairn-bench.XXXXXX)
trap 'rm -rf "$WORK"' EXIT
echo '{}' > "$WORK/input.json"

# --- workflows ------------------------------------------------------------------------------
header() { # name
  printf '[workflow]\nname = "%s"\nversion = "1.0.0"\n\n[tools.echo]\ncommand = ["/bin/echo", "{}"]\n\n' "$1"
}

gen_chain() { # dir steps
  mkdir -p "$1"
  {
    header "bench-chain-$2"
    printf '[[steps]]\nid = "s0"\ntool = "echo"\nargs = {}\n\n'
    for ((i = 1; i < $2; i++)); do
      printf '[[steps]]\nid = "s%d"\ntool = "echo"\nneeds = ["s%d"]\nargs = {}\n\n' "$i" "$((i - 1))"
    done
  } > "$1/workflow.toml"
}

gen_fanin() { # dir roots
  mkdir -p "$1"
  {
    header "bench-fanin-$2"
    for ((i = 0; i < $2; i++)); do
      printf '[[steps]]\nid = "r%d"\ntool = "echo"\nargs = {}\n\n' "$i"
    done
    printf '[[steps]]\nid = "sink"\ntool = "echo"\nargs = {}\nneeds = ['
    for ((i = 0; i < $2; i++)); do
      printf '%s"r%d"' "$([ "$i" -gt 0 ] && echo ', ')" "$i"
    done
    printf ']\n'
  } > "$1/workflow.toml"
}

now() { echo "$EPOCHREALTIME"; }

# One run of a workflow under a fresh CAIRN_HOME: registers it (not timed), times `cairn run`,
# then records `cairn show --json` with the wall time added. In-process: this measures the
# engine; the daemon's own cost is measured by scripts/bench-daemon.sh.
cairn_once() { # label workflow-dir workflow-name rep
  local label=$1 dir=$2 name=$3 rep=$4
  local home
  home=$(mktemp -d -p "$TMPBASE" cairn-home.XXXXXX)
  CAIRN_HOME=$home "$CAIRN" workflow add "$dir" --json > "$OUT/$label-$rep.add.json"
  local t0 t1 rc=0
  t0=$(now)
  CAIRN_HOME=$home "$CAIRN" run "$name" --input "$WORK/input.json" --in-process --json > "$OUT/$label-$rep.run.json" \
    2> "$OUT/$label-$rep.run.err" || rc=$?
  t1=$(now)
  if [ "$rc" -ne 0 ]; then
    log "cairn run $name exited $rc"; cat "$OUT/$label-$rep.run.err" >&2; exit 1
  fi
  local run_id
  run_id=$(jq -r .run_id "$OUT/$label-$rep.run.json")
  CAIRN_HOME=$home "$CAIRN" show "$run_id" --json \
    | jq --arg t0 "$t0" --arg t1 "$t1" --arg home "$home" \
        '. + {bench_wall_s: (($t1 | tonumber) - ($t0 | tonumber)), bench_home: $home}' \
    > "$OUT/$label-$rep.show.json"
  rm -rf "$home"
}

# Medians over the repetitions of one label: wall, wall/step, tool time/step, Cairn's own work/step.
summarise() { # label
  python3 - "$OUT" "$1" <<'PY'
import json, glob, statistics, sys
out, label = sys.argv[1], sys.argv[2]
rows = []
for f in sorted(glob.glob(f"{out}/{label}-[0-9]*.show.json")):
    r = json.load(open(f))
    steps = r["steps"]
    assert r["status"] == "READY", (f, r["status"])
    assert all(s["status"] == "COMPLETED" for s in steps), f
    d = [s["duration_ms"] for s in steps]
    n, wall_ms = len(steps), r["bench_wall_s"] * 1000
    rows.append(dict(n=n, wall_ms=wall_ms, per_step=wall_ms / n, tool_med=statistics.median(d),
                     tool_sum=sum(d), own=(wall_ms - sum(d)) / n))
med = lambda k: statistics.median(x[k] for x in rows)
summary = {k: med(k) for k in ("wall_ms", "per_step", "tool_med", "tool_sum", "own")}
summary.update(label=label, steps=rows[0]["n"], reps=len(rows),
               own_each=[round(x["own"], 3) for x in rows], wall_each=[round(x["wall_ms"]) for x in rows])
json.dump(summary, open(f"{out}/{label}.summary.json", "w"), indent=1)
print(f"| {label:<14} | {summary['steps']:>5} | {summary['reps']:>4} | {summary['wall_ms']/1000:>9.2f} s "
      f"| {summary['per_step']:>8.3f} ms | {summary['tool_med']:>8.3f} ms | {summary['own']:>8.3f} ms "
      f"| {'yes' if summary['own'] < 1 else 'NO':<4} | {summary['own_each']} |")
PY
}

gen_chain "$WORK/chain" "$STEPS"
gen_fanin "$WORK/fanin" "$STEPS"
labels=(chain fanin)
for ((rep = 1; rep <= REPS; rep++)); do
  log "repetition $rep/$REPS: $STEPS-step chain"
  cairn_once chain "$WORK/chain" "bench-chain-$STEPS" "$rep"
  log "repetition $rep/$REPS: $STEPS-wide fan-in (+1 sink)"
  cairn_once fanin "$WORK/fanin" "bench-fanin-$STEPS" "$rep"
done
if [ "$SNAKE" = 1 ] && [ "$SNAKE_STEPS" != "$STEPS" ]; then
  gen_chain "$WORK/chain-s" "$SNAKE_STEPS"
  labels+=(chain-s)
  for ((rep = 1; rep <= REPS; rep++)); do
    log "repetition $rep/$REPS: $SNAKE_STEPS-step chain (the Snakemake comparison's size)"
    cairn_once chain-s "$WORK/chain-s" "bench-chain-$SNAKE_STEPS" "$rep"
  done
fi

echo
echo "## Cairn engine overhead (CAIRN_HOME under $TMPBASE; medians of $REPS)"
echo
echo "| workflow       | steps | reps |      wall   | wall/step   | tool/step   | own/step    | <1ms | own/step each rep |"
echo "|----------------|------:|-----:|------------:|------------:|------------:|------------:|------|-------------------|"
for l in "${labels[@]}"; do summarise "$l"; done

# --- Snakemake --------------------------------------------------------------------------------
if [ "$SNAKE" = 1 ]; then
  VENV=$ROOT/.venv
  if [ ! -x "$VENV/bin/python" ]; then
    log "creating $VENV"
    python3 -m venv "$VENV"
  fi
  if [ ! -x "$VENV/bin/snakemake" ]; then
    log "installing snakemake into $VENV"
    "$VENV/bin/pip" install -q --disable-pip-version-check snakemake
  fi
  SNAKEMAKE=$VENV/bin/snakemake
  log "snakemake $("$SNAKEMAKE" --version)"
  SNAKEFILE=$WORK/Snakefile
  {
    printf 'rule all:\n    input: "out/r%d.txt"\n\n' "$((SNAKE_STEPS - 1))"
    printf 'rule r0:\n    output: "out/r0.txt"\n    shell: "echo {{}} > {output}"\n\n'
    for ((i = 1; i < SNAKE_STEPS; i++)); do
      printf 'rule r%d:\n    input: "out/r%d.txt"\n    output: "out/r%d.txt"\n    shell: "echo {{}} > {output}"\n\n' \
        "$i" "$((i - 1))" "$i"
    done
  } > "$SNAKEFILE"
  cp "$SNAKEFILE" "$OUT/Snakefile"
  for ((rep = 1; rep <= REPS; rep++)); do
    dir=$(mktemp -d -p "$TMPBASE" snake.XXXXXX)
    cp "$SNAKEFILE" "$dir/Snakefile"
    log "repetition $rep/$REPS: snakemake --cores 1 --quiet, $SNAKE_STEPS-rule chain"
    t0=$(now)
    rc=0
    (cd "$dir" && "$SNAKEMAKE" --cores 1 --quiet > "$OUT/snakemake-$rep.out" 2> "$OUT/snakemake-$rep.err") || rc=$?
    t1=$(now)
    if [ "$rc" -ne 0 ]; then
      log "snakemake exited $rc:"; tail -5 "$OUT/snakemake-$rep.err" >&2; exit 1
    fi
    test "$(cat "$dir/out/r$((SNAKE_STEPS - 1)).txt")" = "{}"
    echo "$t0 $t1" > "$OUT/snakemake-$rep.time"
    rm -rf "$dir"
  done
  cairn_label=chain
  [ "$SNAKE_STEPS" != "$STEPS" ] && cairn_label=chain-s
  python3 - "$OUT" "$cairn_label" "$SNAKE_STEPS" <<'PY'
import json, glob, statistics, sys
out, label, n = sys.argv[1], sys.argv[2], int(sys.argv[3])
snake = []
for f in sorted(glob.glob(f"{out}/snakemake-[0-9]*.time")):
    t0, t1 = map(float, open(f).read().split())
    snake.append(t1 - t0)
cairn = json.load(open(f"{out}/{label}.summary.json"))["wall_ms"] / 1000
s = statistics.median(snake)
json.dump({"steps": n, "snakemake_s": s, "snakemake_each": snake, "cairn_s": cairn, "ratio": s / cairn},
          open(f"{out}/snakemake.summary.json", "w"), indent=1)
print(f"\n## {n}-step chain end to end: Snakemake --cores 1 vs cairn run (medians of {len(snake)})\n")
print("| steps | snakemake | cairn run | ratio | >= 10x | snakemake each run |")
print("|------:|----------:|----------:|------:|--------|--------------------|")
print(f"| {n:>5} | {s:>7.2f} s | {cairn:>7.2f} s | {s / cairn:>4.1f}x | {'yes' if s / cairn >= 10 else 'NO':<6} "
      f"| {[round(x, 2) for x in snake]} |")
PY
fi
