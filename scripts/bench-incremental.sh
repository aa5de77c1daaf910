#!/usr/bin/env bash
# A pipeline's next day under Cairn and under plain `snakemake`: one sample added to a 20-sample
# variant-calling pipeline. See BENCHMARKS.md §15.
#
#   scripts/bench-incremental.sh
#
# The pipeline is the test suite's calling pipeline (crates/cairn/tests/fixtures/pipelines/calling:
# bwa index, per-sample bwa mem | samtools view, samtools sort, samtools index, one bcftools
# mpileup | call over all samples), with 21 samples of made-up reads generated here (BENCH_READS a
# sample, 100 bases, on a 20 kb made-up genome). Both sides first run it over samples 1-20
# (untimed), then over samples 1-21, timed:
#   plain   `snakemake --cores 2 --configfile <21 samples>` run again in place, in the folder of
#           the first run (what a Snakemake user does)
#   cairn   `cairn replay RUN --step calling --input <21 samples> --json` through a warm daemon: a
#           child run whose pipeline step starts from a copy of the source run's working copy
#           (each file checked against its recorded SHA-256), so Snakemake runs only what it
#           finds out of date there
# Each round checks both ran the same jobs (rule and wildcards) and wrote the same calls. Reported:
# the jobs each ran, wall times, Snakemake's own time inside Cairn (its supervisor's exit.json),
# and the seeding of the working copy (`seeded.took_ms` in the step's result).
#
# Settings (environment):
#   BENCH_REPS=5        timed rounds (each: one plain, one cairn, alternating which goes first)
#   BENCH_READS=2000    reads a sample
#   BENCH_TMP=/tmp      where the scratch folder and the CAIRN_HOME are made
#   BENCH_OUT=bench-out/incremental-<time>   raw outputs
#   CARGO_TARGET_DIR    honoured by the build; the binary is $CARGO_TARGET_DIR/release/cairn
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$(pwd)

REPS=${BENCH_REPS:-5}
READS=${BENCH_READS:-2000}
TMPBASE=${BENCH_TMP:-/tmp}
OUT=${BENCH_OUT:-$ROOT/bench-out/incremental-$(date +%Y%m%dT%H%M%S)}
CAIRN=${CARGO_TARGET_DIR:-$ROOT/target}/release/cairn

log() { printf '==> %s\n' "$*" >&2; }
now() { echo "$EPOCHREALTIME"; }

[ -x "$ROOT/.venv/bin/snakemake" ] || { log "no snakemake in .venv: run scripts/test.sh first"; exit 1; }
for t in bwa samtools bcftools jq; do
  command -v "$t" > /dev/null || { log "no $t: apt-get install bwa samtools bcftools jq"; exit 1; }
done
export PATH=$ROOT/.venv/bin:$PATH

mkdir -p "$OUT"
log "raw outputs in $OUT"
log "cargo build --release"
cargo build --release -q
log "commit $(git describe --always --dirty 2>/dev/null || echo '(not a git checkout)'); snakemake $(snakemake --version)"
log "machine: $(nproc) CPUs, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2-), kernel $(uname -r), $(df -T "$TMPBASE" | awk 'NR==2 {print $2}') at $TMPBASE"
log "load before: $(uptime)"

WORK=$(mktemp -d -p "$TMPBASE" cairn-bench-incremental.XXXXXX)
export CAIRN_HOME=$WORK/home CAIRN_QUIET_DAEMON=1
unset XDG_STATE_HOME
cleanup() {
  "$CAIRN" daemon stop --json > /dev/null 2>&1 || true
  chmod -R u+w "$WORK" 2> /dev/null || true
  rm -rf "$WORK"
}
trap cleanup EXIT

# --- the pipeline: the fixture's Snakefile, 21 samples of made-up reads ---------------------------
P=$WORK/pipeline
mkdir -p "$P/data/samples" "$P/config"
cp crates/cairn/tests/fixtures/pipelines/calling/Snakefile crates/cairn/tests/fixtures/pipelines/calling/workflow.toml "$P/"
python3 - "$P" "$READS" <<'EOF'
import random, sys
root, reads = sys.argv[1], int(sys.argv[2])
r = random.Random(15)
genome = "".join(r.choice("ACGT") for _ in range(20000))
with open(f"{root}/data/genome.fa", "w") as f:
    f.write(">chr1\n" + "\n".join(genome[i:i + 60] for i in range(0, len(genome), 60)) + "\n")
for s in range(1, 22):
    g = list(genome)
    for p in r.sample(range(len(g)), 10):  # each sample's own variants
        g[p] = r.choice([b for b in "ACGT" if b != g[p]])
    g = "".join(g)
    with open(f"{root}/data/samples/S{s:02d}.fastq", "w") as f:
        for i in range(reads):
            p = r.randint(0, len(g) - 100)
            f.write(f"@S{s:02d}_{i}\n{g[p:p + 100]}\n+\n{'I' * 100}\n")
EOF
printf 'samples: [S01]\n' > "$P/config/config.yaml"
samples() { python3 -c "import json,sys; print(json.dumps([f'S{i:02d}' for i in range(1, int(sys.argv[1]) + 1)]))" "$1"; }
echo "{\"samples\": $(samples 20)}" > "$WORK/config20.json"
echo "{\"samples\": $(samples 21)}" > "$WORK/config21.json"
echo "{\"config\": $(cat "$WORK/config20.json")}" > "$WORK/input20.json"
echo "{\"config\": $(cat "$WORK/config21.json")}" > "$WORK/input21.json"

"$CAIRN" workflow add "$P" --json > "$OUT/workflow-add.json"
"$CAIRN" daemon start --json > "$OUT/daemon-start.json"

# The jobs a Snakemake log ran, as `rule {wildcards}`, sorted.
plain_jobs() {
  awk '/^(local)?(rule|checkpoint) [A-Za-z0-9_]+:$/ { if (r != "") print r " {" w "}"; r = $2; sub(":", "", r); w = ""; next }
       r != "" && /^    wildcards: / { w = substr($0, 16); next }
       r != "" && !/^ / { print r " {" w "}"; r = "" }
       END { if (r != "") print r " {" w "}" }' "$1" | sort
}

plain_once() { # label
  local dir=$WORK/plain-$1 t0 t1
  cp -a "$P" "$dir"
  (cd "$dir" && snakemake --cores 2 --nocolor --configfile "$WORK/config20.json" > "$OUT/$1.plain-first.log" 2>&1)
  t0=$(now)
  (cd "$dir" && snakemake --cores 2 --nocolor --configfile "$WORK/config21.json" > "$OUT/$1.plain.log" 2>&1)
  t1=$(now)
  echo "$t0 $t1" > "$OUT/$1.plain.time"
  plain_jobs "$OUT/$1.plain.log" > "$OUT/$1.plain.jobs"
  sha256sum < "$dir/calls/all.vcf" | cut -d' ' -f1 > "$OUT/$1.plain.vcf.sha256"
  chmod -R u+w "$dir"
  rm -rf "$dir"
}

cairn_once() { # label
  local t0 t1 src child a
  "$CAIRN" run calling --input "$WORK/input20.json" --json > "$OUT/$1.source.json"
  src=$(jq -r .run_id "$OUT/$1.source.json")
  [ "$(jq -r .status "$OUT/$1.source.json")" = READY ] || { log "source run $src is not READY"; exit 1; }
  t0=$(now)
  "$CAIRN" replay "$src" --step calling --input "$WORK/input21.json" --json > "$OUT/$1.replay.json"
  t1=$(now)
  echo "$t0 $t1" > "$OUT/$1.cairn.time"
  child=$(jq -r .run_id "$OUT/$1.replay.json")
  [ "$(jq -r .status "$OUT/$1.replay.json")" = READY ] || { log "replay $child is not READY"; exit 1; }
  "$CAIRN" jobs "$child" calling --json > "$OUT/$1.jobs.json"
  "$CAIRN" result "$child" calling --json > "$OUT/$1.result.json"
  jq -r '.jobs[] | select(.status != "carried") | "\(.rule) {\(.wildcards | to_entries | map("\(.key)=\(.value)") | join(", "))}"' \
    "$OUT/$1.jobs.json" | sort > "$OUT/$1.cairn.jobs"
  a=$(jq -r .run_dir "$OUT/$1.replay.json")/steps/calling
  sha256sum < "$a/calls/all.vcf" | cut -d' ' -f1 > "$OUT/$1.cairn.vcf.sha256"
  jq '.duration_s' "$a/.cairn/attempt-1/exit.json" > "$OUT/$1.snakemake-in-cairn.s"
}

log "warm-up: one plain, one cairn (untimed)"
plain_once warm
cairn_once warm
for ((rep = 1; rep <= REPS; rep++)); do
  log "round $rep/$REPS"
  if ((rep % 2)); then plain_once "r$rep"; cairn_once "r$rep"; else cairn_once "r$rep"; plain_once "r$rep"; fi
  cmp -s "$OUT/r$rep.plain.jobs" "$OUT/r$rep.cairn.jobs" || { log "round $rep: the jobs differ"; diff "$OUT/r$rep.plain.jobs" "$OUT/r$rep.cairn.jobs" >&2; exit 1; }
  cmp -s "$OUT/r$rep.plain.vcf.sha256" "$OUT/r$rep.cairn.vcf.sha256" || { log "round $rep: the calls differ"; exit 1; }
done
log "load after: $(uptime)"

# --- the figures -----------------------------------------------------------------------------------
python3 - "$OUT" "$REPS" <<'EOF'
import json, statistics, sys
out, reps = sys.argv[1], int(sys.argv[2])
def secs(f):
    a, b = open(f).read().split()
    return float(b) - float(a)
rows = []
for r in range(1, reps + 1):
    res = json.load(open(f"{out}/r{r}.result.json"))["result"]
    rows.append({
        "plain_s": secs(f"{out}/r{r}.plain.time"),
        "cairn_s": secs(f"{out}/r{r}.cairn.time"),
        "snakemake_in_cairn_s": float(open(f"{out}/r{r}.snakemake-in-cairn.s").read()),
        "seed_ms": res["seeded"]["took_ms"],
        "carried": res["seeded"]["carried"],
        "jobs_plain": len(open(f"{out}/r{r}.plain.jobs").read().split("\n")) - 1,
        "jobs_cairn": len(open(f"{out}/r{r}.cairn.jobs").read().split("\n")) - 1,
    })
med = lambda k: statistics.median(x[k] for x in rows)
print(json.dumps(rows, indent=1))
p, c, s, seed = med("plain_s"), med("cairn_s"), med("snakemake_in_cairn_s"), med("seed_ms")
print(f"jobs run: plain {rows[0]['jobs_plain']}, cairn {rows[0]['jobs_cairn']} (the same set, checked each round)")
print(f"wall, medians of {reps}: plain snakemake in place {p:.2f} s; cairn replay {c:.2f} s "
      f"(Snakemake inside it {s:.2f} s; seeding the working copy {seed:.0f} ms, {rows[0]['carried']} files)")
print(f"cairn / plain = {c / p:.2f}x; target: <= 1.10 x plain + the copy = {1.10 * p + seed / 1000:.2f} s -> "
      f"{'met' if c <= 1.10 * p + seed / 1000 else 'NOT met'}")
EOF
