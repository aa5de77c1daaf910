#!/usr/bin/env bash
# Cairn's cost per step through the daemon (the path users take), against Snakemake on the same
# DAGs, in one run. See BENCHMARKS.md §2–3 for what each figure means and the results on record.
#
#   scripts/bench-engine.sh            # 300-step chain (serial) and 1,000-wide fan-out + join (--parallel 2)
#
# Settings (environment):
#   BENCH_CHAIN=300       steps of the chain (Snakemake 9 builds its DAG recursively and stops
#                         with RecursionError on a chain deeper than about 500)
#   BENCH_FANOUT=1000     roots of the fan-out; one join step needs them all
#   BENCH_PARALLEL=2      --parallel of the fan-out run, --cores of Snakemake's
#   BENCH_REPS=5          timed repetitions of each (after one untimed warm-up); medians reported
#   BENCH_SNAKEMAKE=1     also time Snakemake (0 to skip)
#   BENCH_TMP=/tmp        where the state roots and Snakemake directories are made
#   BENCH_OUT=bench-out/engine-<time>   where raw outputs are kept
#   BENCH_BASELINE=PATH   another cairn binary (an earlier commit's release build) timed the same
#                         way, interleaved, on its own state root: the before/after ratio
#   BENCH_DATABASE=URL    also time this build with its registry in that PostgreSQL database
#                         (`daemon start --database`; an empty database or schema, on a server
#                         with fsync on for a fair comparison: PG_FSYNC=on scripts/pg-up.sh)
#
# Cairn's own work per step = (wall − Σ the tools' durations) / steps, the tools' durations as
# each step records them (spawn to exit and output collected). Ratios are printed last.
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$(pwd)

CHAIN=${BENCH_CHAIN:-300}
FANOUT=${BENCH_FANOUT:-1000}
PAR=${BENCH_PARALLEL:-2}
REPS=${BENCH_REPS:-5}
SNAKE=${BENCH_SNAKEMAKE:-1}
TMPBASE=${BENCH_TMP:-/tmp}
OUT=${BENCH_OUT:-$ROOT/bench-out/engine-$(date +%Y%m%dT%H%M%S)}
CAIRN=$ROOT/target/release/cairn
BASELINE=${BENCH_BASELINE:-}
DATABASE=${BENCH_DATABASE:-}

log() { printf '==> %s\n' "$*" >&2; }

mkdir -p "$OUT"
log "raw outputs in $OUT"
log "cargo build --release"
cargo build --release -q

WORK=$(mktemp -d -p "$TMPBASE" cairn-bench.XXXXXX)
HOME_DIR=$WORK/state
BASE_HOME=$WORK/state-baseline
PG_HOME=$WORK/state-postgres
cleanup() {
  CAIRN_HOME=$HOME_DIR "$CAIRN" daemon stop > /dev/null 2>&1 || true
  [ -z "$DATABASE" ] || CAIRN_HOME=$PG_HOME "$CAIRN" daemon stop > /dev/null 2>&1 || true
  [ -z "$BASELINE" ] || CAIRN_HOME=$BASE_HOME "$BASELINE" daemon stop > /dev/null 2>&1 || true
  rm -rf "$WORK"
}
trap cleanup EXIT
echo '{}' > "$WORK/input.json"

# --- workflows ------------------------------------------------------------------------------
header() { # name
  printf '[workflow]\nname = "%s"\nversion = "1.0.0"\n\n[tools.echo]\ncommand = ["/bin/echo", "{}"]\n\n' "$1"
}

gen_chain() { # dir steps
  mkdir -p "$1"
  {
    header "bench-chain"
    printf '[[steps]]\nid = "s0"\ntool = "echo"\nargs = {}\n\n'
    for ((i = 1; i < $2; i++)); do
      printf '[[steps]]\nid = "s%d"\ntool = "echo"\nneeds = ["s%d"]\nargs = {}\n\n' "$i" "$((i - 1))"
    done
  } > "$1/workflow.toml"
}

gen_fanout() { # dir roots
  mkdir -p "$1"
  {
    header "bench-fanout"
    for ((i = 0; i < $2; i++)); do
      printf '[[steps]]\nid = "r%d"\ntool = "echo"\nargs = {}\n\n' "$i"
    done
    printf '[[steps]]\nid = "join"\ntool = "echo"\nargs = {}\nneeds = ['
    for ((i = 0; i < $2; i++)); do
      printf '%s"r%d"' "$([ "$i" -gt 0 ] && echo ', ')" "$i"
    done
    printf ']\n'
  } > "$1/workflow.toml"
}

now() { echo "$EPOCHREALTIME"; }

# One timed `cairn run` through the warm daemon, then its record with the wall time added.
cairn_once() { # label workflow parallel rep [binary home]
  local label=$1 name=$2 par=$3 rep=$4 bin=${5:-$CAIRN} home=${6:-$HOME_DIR} t0 t1 rc=0
  t0=$(now)
  CAIRN_HOME=$home "$bin" run "$name" --input "$WORK/input.json" --parallel "$par" --json \
    > "$OUT/$label-$rep.run.json" 2> "$OUT/$label-$rep.run.err" || rc=$?
  t1=$(now)
  if [ "$rc" -ne 0 ]; then
    log "cairn run $name exited $rc"; cat "$OUT/$label-$rep.run.err" >&2; exit 1
  fi
  local run_id
  run_id=$(jq -r .run_id "$OUT/$label-$rep.run.json")
  CAIRN_HOME=$home "$bin" show "$run_id" --json \
    | jq --arg t0 "$t0" --arg t1 "$t1" '. + {bench_wall_s: (($t1 | tonumber) - ($t0 | tonumber))}' \
    > "$OUT/$label-$rep.show.json"
}

snake_once() { # label snakefile cores rep expected-file
  local label=$1 snakefile=$2 cores=$3 rep=$4 expect=$5 dir t0 t1 rc=0
  dir=$(mktemp -d -p "$TMPBASE" snake.XXXXXX)
  cp "$snakefile" "$dir/Snakefile"
  t0=$(now)
  (cd "$dir" && "$SNAKEMAKE" --cores "$cores" --quiet > "$OUT/$label-$rep.out" 2> "$OUT/$label-$rep.err") || rc=$?
  t1=$(now)
  if [ "$rc" -ne 0 ]; then
    log "snakemake exited $rc:"; tail -5 "$OUT/$label-$rep.err" >&2; exit 1
  fi
  test "$(cat "$dir/$expect")" = "{}"
  echo "$t0 $t1" > "$OUT/$label-$rep.time"
  rm -rf "$dir"
}

gen_chain "$WORK/chain" "$CHAIN"
gen_fanout "$WORK/fanout" "$FANOUT"
CAIRN_HOME=$HOME_DIR "$CAIRN" workflow add "$WORK/chain" --json > /dev/null
CAIRN_HOME=$HOME_DIR "$CAIRN" workflow add "$WORK/fanout" --json > /dev/null
CAIRN_HOME=$HOME_DIR "$CAIRN" daemon start > "$OUT/daemon.txt"
log "$(cat "$OUT/daemon.txt")"
if [ -n "$DATABASE" ]; then
  CAIRN_HOME=$PG_HOME "$CAIRN" daemon start --database "$DATABASE" > "$OUT/daemon-postgres.txt"
  CAIRN_HOME=$PG_HOME "$CAIRN" workflow add "$WORK/chain" --json > /dev/null
  CAIRN_HOME=$PG_HOME "$CAIRN" workflow add "$WORK/fanout" --json > /dev/null
  log "postgres registry: $(cat "$OUT/daemon-postgres.txt")"
fi
if [ -n "$BASELINE" ]; then
  CAIRN_HOME=$BASE_HOME "$BASELINE" workflow add "$WORK/chain" --json > /dev/null
  CAIRN_HOME=$BASE_HOME "$BASELINE" workflow add "$WORK/fanout" --json > /dev/null
  CAIRN_HOME=$BASE_HOME "$BASELINE" daemon start > "$OUT/daemon-baseline.txt"
  log "baseline $BASELINE: $(cat "$OUT/daemon-baseline.txt")"
fi

if [ "$SNAKE" = 1 ]; then
  VENV=${CAIRN_TEST_VENV:-$ROOT/.venv}
  if [ ! -x "$VENV/bin/snakemake" ]; then
    log "installing the test venv's packages (scripts/requirements-test.txt) into $VENV"
    [ -x "$VENV/bin/python" ] || python3 -m venv "$VENV"
    "$VENV/bin/pip" install -q --disable-pip-version-check -r scripts/requirements-test.txt
  fi
  SNAKEMAKE=$VENV/bin/snakemake
  log "snakemake $("$SNAKEMAKE" --version)"
  {
    printf 'rule all:\n    input: "out/r%d.txt"\n\n' "$((CHAIN - 1))"
    printf 'rule r0:\n    output: "out/r0.txt"\n    shell: "echo {{}} > {output}"\n\n'
    for ((i = 1; i < CHAIN; i++)); do
      printf 'rule r%d:\n    input: "out/r%d.txt"\n    output: "out/r%d.txt"\n    shell: "echo {{}} > {output}"\n\n' \
        "$i" "$((i - 1))" "$i"
    done
  } > "$WORK/Snakefile.chain"
  # The idiomatic fan-out: one rule with a wildcard, one job per root, and a join.
  cat > "$WORK/Snakefile.fanout" <<EOF
ROOTS = range($FANOUT)

rule all:
    input: "out/join.txt"

rule join:
    input: expand("out/r{i}.txt", i=ROOTS)
    output: "out/join.txt"
    shell: "echo {{}} > {output}"

rule root:
    output: "out/r{i}.txt"
    shell: "echo {{}} > {output}"
EOF
  cp "$WORK/Snakefile.chain" "$WORK/Snakefile.fanout" "$OUT/"
fi

# Interleaved: each repetition runs every measurement once, so a slow moment of this noisy
# machine falls on all of them alike. Repetition 0 is the untimed warm-up.
for ((rep = 0; rep <= REPS; rep++)); do
  log "repetition $rep/$REPS$([ "$rep" = 0 ] && echo ' (warm-up)')"
  cairn_once chain bench-chain 1 "$rep"
  cairn_once fanout bench-fanout "$PAR" "$rep"
  if [ -n "$DATABASE" ]; then
    cairn_once pg-chain bench-chain 1 "$rep" "$CAIRN" "$PG_HOME"
    cairn_once pg-fanout bench-fanout "$PAR" "$rep" "$CAIRN" "$PG_HOME"
  fi
  if [ -n "$BASELINE" ]; then
    cairn_once base-chain bench-chain 1 "$rep" "$BASELINE" "$BASE_HOME"
    cairn_once base-fanout bench-fanout "$PAR" "$rep" "$BASELINE" "$BASE_HOME"
  fi
  if [ "$SNAKE" = 1 ]; then
    snake_once snake-chain "$WORK/Snakefile.chain" 1 "$rep" "out/r$((CHAIN - 1)).txt"
    snake_once snake-fanout "$WORK/Snakefile.fanout" "$PAR" "$rep" out/join.txt
  fi
done

# The floor under a serial step's own work: one durable commit. The registry's commit of a chain
# step writes about six WAL frames (4,120 bytes each) and syncs the file; here the same writes and
# sync on a 4 MiB file already written once (as the WAL is after its first checkpoint), with a
# tool's spawn and exit between commits as in the chain.
log "one commit's sync on $TMPBASE, 300 times"
python3 - "$WORK" "$OUT" <<'PY'
import os, statistics, subprocess, sys, time, json
work, out = sys.argv[1], sys.argv[2]
path = os.path.join(work, "sync-floor")
fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o600)
size, frame = 4 << 20, 4120
os.pwrite(fd, b"x" * size, 0)
os.fsync(fd)
at, ts = 32, []
for _ in range(300):
    subprocess.run(["/bin/echo", "{}"], stdout=subprocess.DEVNULL)
    t0 = time.perf_counter()
    for _ in range(6):
        os.pwrite(fd, b"y" * frame, at)
        at = 32 if at + 2 * frame > size else at + frame
    os.fsync(fd)
    ts.append((time.perf_counter() - t0) * 1000)
os.close(fd)
ts.sort()
floor = {"p10_ms": ts[30], "median_ms": statistics.median(ts), "p90_ms": ts[270], "mean_ms": statistics.mean(ts)}
json.dump(floor, open(os.path.join(out, "sync-floor.json"), "w"))
PY

python3 - "$OUT" "$REPS" "$SNAKE" "$PAR" "$BASELINE" "$DATABASE" <<'PY'
import json, glob, statistics, sys
out, reps, snake, par, baseline, database = sys.argv[1], int(sys.argv[2]), sys.argv[3] == "1", int(sys.argv[4]), sys.argv[5], sys.argv[6]
med = statistics.median

def cairn(label):
    rows = []
    for rep in range(1, reps + 1):
        r = json.load(open(f"{out}/{label}-{rep}.show.json"))
        assert r["status"] == "READY", (label, rep, r["status"])
        steps = r["steps"]
        assert all(s["status"] == "COMPLETED" for s in steps), (label, rep)
        d = [s["duration_ms"] for s in steps]
        wall = r["bench_wall_s"] * 1000
        # With several slots the tools' time is shared among them: what is beyond a perfect
        # packing of it onto `parallel` slots is Cairn's.
        slots = 1 if label.endswith("chain") else par
        rows.append(dict(n=len(steps), wall=wall, tool=med(d), own=(wall - sum(d) / slots) / len(steps)))
    return rows

def snakes(label):
    ts = []
    for rep in range(1, reps + 1):
        t0, t1 = map(float, open(f"{out}/{label}-{rep}.time").read().split())
        ts.append((t1 - t0) * 1000)
    return ts

chain, fan = cairn("chain"), cairn("fanout")
summary = {"reps": reps, "parallel": par}
print(f"\n## Cairn through the daemon (medians of {reps}; each rep in brackets)\n")
print("| workflow | steps | wall | wall/step | tool/step | own/step | own/step each rep |")
print("|---|---:|---:|---:|---:|---:|---|")
runs = [("chain", chain, "serial"), ("fanout", fan, f"--parallel {par}")]
if database:
    runs += [("pg-chain", cairn("pg-chain"), "serial, PostgreSQL registry"), ("pg-fanout", cairn("pg-fanout"), f"--parallel {par}, PostgreSQL registry")]
if baseline:
    runs += [("base-chain", cairn("base-chain"), "serial, baseline"), ("base-fanout", cairn("base-fanout"), f"--parallel {par}, baseline")]
for label, rows, note in runs:
    s = {k: med(x[k] for x in rows) for k in ("wall", "tool", "own")}
    s["steps"] = rows[0]["n"]
    s["each_own"] = [round(x["own"], 3) for x in rows]
    s["each_wall"] = [round(x["wall"], 1) for x in rows]
    summary[label] = s
    print(f"| {label} ({note}) | {s['steps']} | {s['wall']:.0f} ms | {s['wall'] / s['steps']:.3f} ms "
          f"| {s['tool']:.3f} ms | {s['own']:.3f} ms | {s['each_own']} |")
if database:
    print("\n## The PostgreSQL registry ÷ the SQLite registry, this build, end to end, medians\n")
    print("| DAG | SQLite | PostgreSQL | ratio | own/step SQLite → PostgreSQL |")
    print("|---|---:|---:|---:|---|")
    for label in ("chain", "fanout"):
        q, p = summary[label], summary[f"pg-{label}"]
        print(f"| {label} | {q['wall']:.0f} ms | {p['wall']:.0f} ms | {p['wall'] / q['wall']:.2f}× | {q['own']:.3f} → {p['own']:.3f} ms |")
floor = json.load(open(f"{out}/sync-floor.json"))
summary["sync_floor"] = floor
print(f"\nThe floor: one commit's writes and sync here: median {floor['median_ms']:.3f} ms, mean "
      f"{floor['mean_ms']:.3f} ms (p10 {floor['p10_ms']:.3f}, p90 {floor['p90_ms']:.3f}); a serial step's own work "
      f"above it: {summary['chain']['own'] - floor['mean_ms']:.3f} ms")
if baseline:
    print(f"\n## Baseline ({baseline}) ÷ this build, end to end, medians\n")
    print("| DAG | baseline | this build | ratio | own/step baseline → this build |")
    print("|---|---:|---:|---:|---|")
    for label in ("chain", "fanout"):
        b, c = summary[f"base-{label}"], summary[label]
        print(f"| {label} | {b['wall']:.0f} ms | {c['wall']:.0f} ms | {b['wall'] / c['wall']:.2f}× "
              f"| {b['own']:.3f} → {c['own']:.3f} ms |")
if snake:
    print("\n## Ratios: Snakemake ÷ Cairn, end to end, medians (last)\n")
    print("| DAG | snakemake | cairn run | ratio | target | met | snakemake each rep (ms) |")
    print("|---|---:|---:|---:|---:|---|---|")
    for label, cores in (("chain", 1), ("fanout", par)):
        ts = snakes(f"snake-{label}")
        s, c = med(ts), summary[label]["wall"]
        summary[f"snakemake_{label}"] = {"median_ms": s, "each_ms": [round(t) for t in ts], "ratio": s / c}
        print(f"| {label}, --cores {cores} | {s:.0f} ms | {c:.0f} ms | **{s / c:.1f}×** | 20× "
              f"| {'yes' if s / c >= 20 else 'no'} | {[round(t) for t in ts]} |")
json.dump(summary, open(f"{out}/summary.json", "w"), indent=1)
PY
