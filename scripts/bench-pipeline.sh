#!/usr/bin/env bash
# What running a Snakemake pipeline through Cairn adds to plain `snakemake`. See BENCHMARKS.md §11.
#
#   scripts/bench-pipeline.sh
#
# The pipeline (generated here into a scratch folder, not committed): 24 samples of 2,000
# pseudo-random reads each (data/sNN.fa, 3.3 MiB in all) beside a Snakefile with two per-sample
# rules and an aggregate, 24 + 24 + 1 + `all` = 50 jobs as Snakemake counts them:
#   qc       sleep 0.2, then awk drops reads shorter than 60 or with an N
#   gc       sleep 0.2, then awk makes a histogram of each kept read's GC content
#   summary  a Python script beside the Snakefile reads the 24 histograms into one table
# The naps stand for the tool time of real jobs, so the pipeline takes seconds, as real ones do.
#
# Measured, interleaved (the order alternates each round: these VMs are noisy, medians count):
#   plain   `snakemake --cores 2` in a fresh copy of the folder (the peer; the copy is not timed)
#   cairn   `cairn run bench-pipeline --input {} --json`, the same folder registered in Cairn, a
#           fresh run each time, through a daemon started once beforehand (its start is timed
#           separately and not in the runs). It includes everything Cairn does for the pipeline:
#           the working copy, the step agent, following the log (per-job events), hashing every
#           output into an artifact, the final commits.
# Each Cairn run is checked: READY, 50 `pipeline.job_finished` events, 49 artifacts whose hashes
# are those of the files plain Snakemake wrote.
#
# Settings (environment):
#   BENCH_REPS=7        timed rounds (each: one plain, one cairn), after one untimed warm-up of each
#   BENCH_NAP=0.2       seconds each per-sample job sleeps
#   BENCH_TMP=/tmp      where the scratch folder and the CAIRN_HOME are made
#   BENCH_OUT=bench-out/pipeline-<time>   where raw outputs (runs, events, logs) are kept
#   CARGO_TARGET_DIR    honoured by the build; the binary is $CARGO_TARGET_DIR/release/cairn
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$(pwd)

REPS=${BENCH_REPS:-7}
NAP=${BENCH_NAP:-0.2}
TMPBASE=${BENCH_TMP:-/tmp}
OUT=${BENCH_OUT:-$ROOT/bench-out/pipeline-$(date +%Y%m%dT%H%M%S)}
CAIRN=${CARGO_TARGET_DIR:-$ROOT/target}/release/cairn

log() { printf '==> %s\n' "$*" >&2; }
now() { echo "$EPOCHREALTIME"; }

# Cairn finds `snakemake` and the step agent's `python3` on the daemon's PATH, which is this one
# (the daemon is started below): the venv's first, as for the plain runs.
[ -x "$ROOT/.venv/bin/snakemake" ] || { log "no snakemake in .venv: run scripts/test.sh first"; exit 1; }
export PATH=$ROOT/.venv/bin:$PATH

mkdir -p "$OUT"
log "raw outputs in $OUT"
log "cargo build --release"
cargo build --release -q
log "commit $(git describe --always --dirty 2>/dev/null || echo '(not a git checkout)'); snakemake $(snakemake --version)"
log "machine: $(nproc) CPUs, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2-), kernel $(uname -r)"
log "load before: $(uptime)"

WORK=$(mktemp -d -p "$TMPBASE" cairn-bench-pipeline.XXXXXX)
export CAIRN_HOME=$WORK/home CAIRN_QUIET_DAEMON=1
unset XDG_STATE_HOME
cleanup() {
  "$CAIRN" daemon stop --json > /dev/null 2>&1 || true
  rm -rf "$WORK"
}
trap cleanup EXIT

# --- the pipeline --------------------------------------------------------------------------------
P=$WORK/pipeline
mkdir -p "$P/data" "$P/scripts"
cat > "$P/Snakefile" <<EOF
# A small read-QC pipeline: 24 samples, two per-sample rules, one aggregate (50 jobs with \`all\`).
SAMPLES = sorted(glob_wildcards("data/{sample}.fa").sample)


rule all:
    input:
        "results/summary.tsv",


# Drops reads that are short or contain an N.
rule qc:
    input:
        "data/{sample}.fa",
    output:
        "results/qc/{sample}.fa",
    shell:
        "sleep $NAP; awk 'length(\$0) >= 60 && \$0 !~ /N/' {input} > {output}"


# The GC content of each kept read, as a histogram of 10 % bins.
rule gc:
    input:
        "results/qc/{sample}.fa",
    output:
        "results/gc/{sample}.tsv",
    shell:
        "sleep $NAP; awk '{{ n = gsub(/[GC]/, \"&\"); b = int(10 * n / length(\$0)); h[b]++ }}"
        " END {{ for (b = 0; b <= 10; b++) print b, h[b] + 0 }}' {input} > {output}"


rule summary:
    input:
        expand("results/gc/{sample}.tsv", sample=SAMPLES),
    output:
        "results/summary.tsv",
    shell:
        "python3 scripts/summarise.py {input} > {output}"
EOF
cat > "$P/scripts/summarise.py" <<'EOF'
"""One line per sample: the reads kept and their mean GC bin, from each sample's histogram."""
import os
import sys

print("sample\treads\tmean_gc_bin")
for path in sys.argv[1:]:
    rows = [tuple(map(int, line.split())) for line in open(path)]
    reads = sum(n for _, n in rows)
    mean = sum(b * n for b, n in rows) / reads if reads else 0.0
    print(f"{os.path.basename(path)[:-4]}\t{reads}\t{mean:.3f}")
EOF
# Deterministic inputs: 2,000 reads of 40-100 bases each, about 1 % of positions may be an N.
python3 - "$P/data" <<'EOF'
import random, sys
r = random.Random(42)
for i in range(1, 25):
    with open(f"{sys.argv[1]}/s{i:02d}.fa", "w") as f:
        for _ in range(2000):
            n = r.randint(40, 100)
            f.write("".join(r.choice("ACGT" if r.random() > 0.01 else "ACGTN") for _ in range(n)) + "\n")
EOF
cat > "$P/workflow.toml" <<'EOF'
[workflow]
name = "bench-pipeline"
version = "1.0.0"
description = "A 50-job read-QC Snakemake pipeline, for scripts/bench-pipeline.sh"

[tools.pipeline]
kind = "snakemake"
timeout_secs = 600

[[steps]]
id = "pipeline"
tool = "pipeline"
args = { snakefile = "Snakefile", cores = 2 }
EOF
echo '{}' > "$WORK/input.json"

# --- Cairn: the registry and a warm daemon --------------------------------------------------------
"$CAIRN" workflow add "$P" --json > "$OUT/workflow-add.json"
t0=$(now)
"$CAIRN" daemon start --json > "$OUT/daemon-start.json"
t1=$(now)
echo "$t0 $t1" > "$OUT/daemon-start.time"
DAEMON_PID=$(jq -r .pid "$OUT/daemon-start.json")

# One plain run in a fresh copy; `label` names its files in $OUT.
plain_once() { # label
  local dir=$WORK/plain-$1 t0 t1
  cp -a "$P" "$dir"
  t0=$(now)
  (cd "$dir" && snakemake --cores 2 > "$OUT/$1.plain.log" 2>&1)
  t1=$(now)
  echo "$t0 $t1" > "$OUT/$1.plain.time"
  # What plain Snakemake wrote, to check Cairn's artifacts against.
  (cd "$dir" && find results -type f -print0 | sort -z | xargs -0 sha256sum) > "$OUT/$1.plain.sha256"
  rm -rf "$dir"
}

# The daemon's own CPU time (user + system, clock ticks; its children not included).
daemon_cpu() { awk '{ print $14 + $15 }' "/proc/$DAEMON_PID/stat"; }

# One `cairn run` through the daemon, then (untimed) what it recorded, and when the step's files
# were written: the working copy's marker (the copy is made), the agent's stdin.json (the agent
# has started and checked the pipeline's files), pid.json (Snakemake launched) and exit.json
# (Snakemake's own duration, measured by its supervisor).
cairn_once() { # label
  local t0 t1 run a c0 c1
  c0=$(daemon_cpu)
  t0=$(now)
  "$CAIRN" run bench-pipeline --input "$WORK/input.json" --json > "$OUT/$1.run.json"
  t1=$(now)
  c1=$(daemon_cpu)
  echo "$t0 $t1" > "$OUT/$1.cairn.time"
  echo "$(((c1 - c0) * 1000 / $(getconf CLK_TCK)))" > "$OUT/$1.daemon-cpu-ms"
  run=$(jq -r .run_id "$OUT/$1.run.json")
  "$CAIRN" show "$run" --json > "$OUT/$1.show.json"
  "$CAIRN" events "$run" --json > "$OUT/$1.events.json"
  a=$(jq -r .run_dir "$OUT/$1.run.json")/steps/pipeline/.cairn
  jq -n --arg copied "$(stat -c %.6Y "$a/working-copy")" --arg agent "$(stat -c %.6Y "$a/attempt-1/stdin.json")" \
    --arg files "$(wc -l < "$a/working-copy")" \
    --slurpfile pid "$a/attempt-1/pid.json" --slurpfile exit "$a/attempt-1/exit.json" \
    '{copied: ($copied | tonumber), agent: ($agent | tonumber), launched: $pid[0].launched_at,
      duration_s: $exit[0].duration_s, copied_files: ($files | tonumber)}' > "$OUT/$1.attempt.json"
}

log "warm-up: one plain, one cairn (untimed)"
plain_once warm
cairn_once warm
for ((rep = 1; rep <= REPS; rep++)); do
  log "round $rep/$REPS"
  if ((rep % 2)); then plain_once "r$rep"; cairn_once "r$rep"; else cairn_once "r$rep"; plain_once "r$rep"; fi
done
log "load after: $(uptime)"

# The report, also kept as $OUT/report.md.
python3 - "$OUT" "$REPS" <<'PY' | tee "$OUT/report.md"
import datetime, json, statistics, sys
out, reps = sys.argv[1], int(sys.argv[2])
med = statistics.median


def times(path):
    return [float(x) * 1000 for x in open(path).read().split()]


def ms(e):
    return datetime.datetime.fromisoformat(e["at"].replace("Z", "+00:00")).timestamp() * 1000


plain, cairn, snake, cpu, phases = [], [], [], [], []
for label in ["warm"] + [f"r{i}" for i in range(1, reps + 1)]:
    assert "50 of 50 steps (100%) done" in open(f"{out}/{label}.plain.log").read(), f"{label}: plain did not do 50 jobs"
    run = json.load(open(f"{out}/{label}.show.json"))
    assert run["status"] == "READY", (label, run["status"])
    step = run["steps"][0]
    events = json.load(open(f"{out}/{label}.events.json"))["events"]
    finished = sum(e["kind"] == "pipeline.job_finished" for e in events)
    assert finished == 50, f"{label}: {finished} pipeline.job_finished events, not 50"
    assert step["result"]["jobs"] == {"total": 50, "done": 50, "failed": 0}, step["result"]["jobs"]
    # Cairn's artifacts are the files plain Snakemake wrote, byte for byte.
    theirs = {line.split()[1]: line.split()[0] for line in open(f"{out}/{label}.plain.sha256")}
    mine = {a["name"]: a["sha256"] for a in step["artifacts"]}
    assert len(theirs) == 49 and mine == theirs, f"{label}: the artifacts are not the files plain snakemake wrote"
    if label == "warm":
        continue
    p0, p1 = times(f"{out}/{label}.plain.time")
    c0, c1 = times(f"{out}/{label}.cairn.time")
    a = json.load(open(f"{out}/{label}.attempt.json"))
    at = {}
    for e in events:
        at.setdefault(e["kind"], []).append(ms(e))
    launched, ran = a["launched"] * 1000, a["duration_s"] * 1000
    plain.append(p1 - p0)
    cairn.append(c1 - c0)
    snake.append(ran)
    cpu.append(int(open(f"{out}/{label}.daemon-cpu-ms").read()))
    phases.append({
        "`cairn run` start → `run.created` (CLI start, submit)": at["run.created"][0] - c0,
        "`run.created` → `step.started`": at["step.started"][0] - at["run.created"][0],
        f"→ working copy made ({a['copied_files']} files, 3.3 MiB, each checked)": a["copied"] * 1000 - at["step.started"][0],
        "→ step agent started, pipeline files checked": a["agent"] * 1000 - a["copied"] * 1000,
        "→ Snakemake launched (supervisor, pid recorded)": launched - a["agent"] * 1000,
        "**Snakemake itself** (its supervisor's `duration_s`)": ran,
        "Snakemake exited → `step.completed` (exit seen, log read to its end, copy hashed, committed)": at["step.completed"][0] - (launched + ran),
        "`step.completed` → `run.finished`": at["run.finished"][0] - at["step.completed"][0],
        "`run.finished` → `cairn run` exits": c1 - at["run.finished"][0],
    })

each = lambda xs: ", ".join(f"{x:.0f}" for x in xs)
p, c = med(plain), med(cairn)
own = [x - y for x, y in zip(cairn, snake)]
pairs = [y - x for x, y in zip(plain, cairn)]
print(f"\n## 50-job Snakemake pipeline, plain vs through Cairn (medians of {reps} interleaved rounds)\n")
print("| | median | each round |")
print("|---|---:|---|")
print(f"| plain `snakemake --cores 2`, fresh copy (the peer) | {p:.0f} ms | {each(plain)} |")
print(f"| `cairn run`, whole command, warm daemon | {c:.0f} ms | {each(cairn)} |")
print(f"| Snakemake under Cairn (its supervisor's `duration_s`) | {med(snake):.0f} ms | {each(snake)} |")
print(f"| Cairn's own time (`cairn run` − Snakemake under Cairn) | {med(own):.0f} ms | {each(own)} |")
print(f"\nCairn ÷ plain, medians: **{c / p:.3f}×** ({c - p:+.0f} ms, {(c / p - 1) * 100:+.1f} %); "
      f"per round (cairn − plain): {', '.join(f'{x:+.0f}' for x in pairs)} ms, median {med(pairs):+.0f} ms")
print(f"Cairn's own time ÷ plain: {med(own) / p * 100:.1f} %; the daemon's CPU per run "
      f"(user + system, its children not counted): median {med(cpu)} ms ({each(cpu)})")
print(f"\n## Where `cairn run`'s time goes (event and attempt-file timestamps; medians of {reps})\n")
print("| phase | median | each round |")
print("|---|---:|---|")
for k in phases[0]:
    xs = [ph[k] for ph in phases]
    print(f"| {k} | {med(xs):.1f} ms | {each(xs)} |")
print("\nEvery run READY, with 50 `pipeline.job_finished` events and 49 artifacts equal to plain's files.")
d0, d1 = times(f"{out}/daemon-start.time")
print(f"`cairn daemon start`, once before the rounds (not in the figures): {d1 - d0:.0f} ms")
PY
