#!/usr/bin/env bash
# What recording artifacts costs, end to end through the release binary. See BENCHMARKS.md §10.
#
#   scripts/bench-artifacts.sh
#
# 1. Per-step overhead with and without a declared 1 MiB output: a chain whose every step writes
#    a 1 MiB file, once with `outputs = { out = "out.bin" }` and once without (the same tool, so
#    the difference is Cairn hashing and recording the file), and a chain of `/bin/echo {}`.
# 2. A 1 GiB output folder (1,024 files of 1 MiB): one step that writes it, with and without the
#    folder declared; the difference is the time to hash it, compared in the same run with
#    `sha256sum` over the same files (coreutils, the peer).
# 3. A replay of the 1 MiB chain that reuses every step but the last: the reused artifacts are
#    checked and hard-linked into the child.
#
# Settings (environment):
#   BENCH_STEPS=200   steps of the chains
#   BENCH_REPS=3      repetitions; medians are reported
#   BENCH_TMP=/tmp    where the fresh CAIRN_HOMEs are made
#   BENCH_OUT=bench-out/artifacts-<time>   where raw outputs are kept
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$(pwd)

STEPS=${BENCH_STEPS:-200}
REPS=${BENCH_REPS:-3}
TMPBASE=${BENCH_TMP:-/tmp}
OUT=${BENCH_OUT:-$ROOT/bench-out/artifacts-$(date +%Y%m%dT%H%M%S)}
CAIRN=$ROOT/target/release/cairn

log() { printf '==> %s\n' "$*" >&2; }
now() { echo "$EPOCHREALTIME"; }

mkdir -p "$OUT"
log "raw outputs in $OUT"
log "cargo build --release"
cargo build --release -q

WORK=$(mktemp -d -p "$TMPBASE" cairn-bench-art.XXXXXX)
trap 'rm -rf "$WORK"' EXIT
echo '{}' > "$WORK/input.json"

# The tools: shell scripts in the workflow folder (a tool file is part of the step's signature).
write_tools() { # dir
  mkdir -p "$1/tools"
  printf '#!/bin/sh\ncat > /dev/null\nhead -c 1048576 /dev/zero > out.bin\necho {}\n' > "$1/tools/mib.sh"
  printf '#!/bin/sh\ncat > /dev/null\nmkdir -p folder\nfor i in $(seq 1024); do head -c 1048576 /dev/urandom > folder/f$i.bin; done\necho {}\n' \
    > "$1/tools/gib.sh"
  chmod +x "$1/tools/mib.sh" "$1/tools/gib.sh"
}

gen_chain() { # dir name command outputs
  write_tools "$1"
  {
    printf '[workflow]\nname = "%s"\nversion = "1.0.0"\n\n[tools.t]\ncommand = %s\n%s\n\n' "$2" "$3" "$4"
    printf '[[steps]]\nid = "s0"\ntool = "t"\n\n'
    for ((i = 1; i < STEPS; i++)); do
      printf '[[steps]]\nid = "s%d"\ntool = "t"\nneeds = ["s%d"]\n\n' "$i" "$((i - 1))"
    done
  } > "$1/workflow.toml"
}

ONE_MIB='["tools/mib.sh"]'
gen_chain "$WORK/echo" bench-echo '["/bin/echo", "{}"]' ''
gen_chain "$WORK/file" bench-file "$ONE_MIB" ''
gen_chain "$WORK/out" bench-out "$ONE_MIB" 'outputs = { out = "out.bin" }'

ONE_GIB='["tools/gib.sh"]'
one_step() { # dir name outputs
  write_tools "$1"
  printf '[workflow]\nname = "%s"\nversion = "1.0.0"\n\n[tools.t]\ncommand = %s\ntimeout_secs = 600\n%s\n\n[[steps]]\nid = "s0"\ntool = "t"\n' \
    "$2" "$ONE_GIB" "$3" > "$1/workflow.toml"
}
one_step "$WORK/gib" bench-gib ''
one_step "$WORK/gib-out" bench-gib-out 'outputs = { folder = "folder/" }'

# One run under a fresh CAIRN_HOME: wall time of `cairn run`, and `cairn show --json`. Keeps the
# home for the replay when asked.
run_once() { # label dir name rep [keep]
  local label=$1 dir=$2 name=$3 rep=$4 keep=${5:-}
  local home t0 t1
  home=$(mktemp -d -p "$TMPBASE" cairn-home.XXXXXX)
  CAIRN_HOME=$home "$CAIRN" workflow add "$dir" --json > /dev/null
  t0=$(now)
  CAIRN_HOME=$home "$CAIRN" run "$name" --input "$WORK/input.json" --in-process --json > "$OUT/$label-$rep.run.json"
  t1=$(now)
  CAIRN_HOME=$home "$CAIRN" show "$(jq -r .run_id "$OUT/$label-$rep.run.json")" --json \
    | jq --arg t0 "$t0" --arg t1 "$t1" '. + {bench_wall_s: (($t1 | tonumber) - ($t0 | tonumber))}' \
    > "$OUT/$label-$rep.show.json"
  if [ -n "$keep" ]; then echo "$home"; else rm -rf "$home"; fi
}

for ((rep = 1; rep <= REPS; rep++)); do
  for l in echo file; do
    log "repetition $rep/$REPS: $STEPS-step chain, $l"
    run_once "$l" "$WORK/$l" "bench-$l" "$rep"
  done
  log "repetition $rep/$REPS: $STEPS-step chain, 1 MiB output declared, then a replay of its last step"
  home=$(run_once out "$WORK/out" bench-out "$rep" keep)
  src=$(jq -r .run_id "$OUT/out-$rep.run.json")
  t0=$(now)
  CAIRN_HOME=$home "$CAIRN" replay "$src" --step "s$((STEPS - 1))" --in-process --json > "$OUT/replay-$rep.json"
  t1=$(now)
  echo "$t0 $t1" > "$OUT/replay-$rep.time"
  child_dir=$(jq -r .run_dir "$OUT/replay-$rep.json")
  src_dir=$(jq -r .run_dir "$OUT/out-$rep.run.json")
  [ "$(stat -c %i "$src_dir/steps/s0/out.bin")" = "$(stat -c %i "$child_dir/steps/s0/out.bin")" ] \
    || { log "the reused artifact was not hard-linked"; exit 1; }
  rm -rf "$home"
  for l in gib gib-out; do
    log "repetition $rep/$REPS: one step writing a 1 GiB folder, $l"
    home=$(run_once "$l" "$WORK/$l" "bench-$l" "$rep" keep)
    if [ "$l" = gib-out ]; then
      dir=$(jq -r .run_dir "$OUT/$l-$rep.run.json")/steps/s0/folder
      t0=$(now)
      find "$dir" -type f -print0 | xargs -0 sha256sum > "$OUT/sha256sum-$rep.txt"
      t1=$(now)
      echo "$t0 $t1" > "$OUT/sha256sum-$rep.time"
      # The same hashes: what Cairn recorded is what sha256sum says.
      python3 - "$OUT/$l-$rep.show.json" "$OUT/sha256sum-$rep.txt" <<'PY'
import json, os, sys
run = json.load(open(sys.argv[1]))
recorded = {os.path.basename(a["path"]): a["sha256"] for a in run["steps"][0]["artifacts"]}
theirs = {os.path.basename(line.split()[1]): line.split()[0] for line in open(sys.argv[2])}
assert len(recorded) == 1024 and recorded == theirs, "Cairn and sha256sum disagree"
PY
    fi
    rm -rf "$home"
  done
done

python3 - "$OUT" "$STEPS" <<'PY'
import glob, json, statistics, sys
out, steps = sys.argv[1], int(sys.argv[2])
def walls(label):
    return [json.load(open(f))["bench_wall_s"] for f in sorted(glob.glob(f"{out}/{label}-[0-9]*.show.json"))]
def own(label):
    res = []
    for f in sorted(glob.glob(f"{out}/{label}-[0-9]*.show.json")):
        r = json.load(open(f))
        assert r["status"] == "READY", (f, r["status"])
        res.append((r["bench_wall_s"] * 1000 - sum(s["duration_ms"] for s in r["steps"])) / len(r["steps"]))
    return res
def span(pattern):
    res = []
    for f in sorted(glob.glob(f"{out}/{pattern}-[0-9]*.time")):
        t0, t1 = map(float, open(f).read().split())
        res.append(t1 - t0)
    return res
med = statistics.median
e, f, o = own("echo"), own("file"), own("out")
print(f"\n## Per step, {steps}-step chains (medians of {len(e)}; own work = (wall - tool time) / steps)\n")
print("| chain | wall/step | own work/step | each |")
print("|---|---:|---:|---|")
for name, label, ow in [("`/bin/echo {}`", "echo", e), ("writes 1 MiB, no output declared", "file", f),
                        ("writes 1 MiB, declared as an output", "out", o)]:
    print(f"| {name} | {med(walls(label)) * 1000 / steps:.2f} ms | {med(ow):.2f} ms | {[round(x, 2) for x in ow]} |")
print(f"\nThe declared 1 MiB output costs {med(o) - med(f):.2f} ms a step (own work, declared − undeclared).")
g, go, sha = walls("gib"), walls("gib-out"), span("sha256sum")
hash_s = med(go) - med(g)
print(f"\n## A 1 GiB output folder (1,024 files of 1 MiB), medians of {len(g)}\n")
print("| | seconds | each |")
print("|---|---:|---|")
print(f"| the step, folder not declared | {med(g):.2f} | {[round(x, 2) for x in g]} |")
print(f"| the step, folder declared | {med(go):.2f} | {[round(x, 2) for x in go]} |")
print(f"| Cairn's hashing and recording (the difference) | {hash_s:.2f} | |")
print(f"| `sha256sum` over the same 1,024 files | {med(sha):.2f} | {[round(x, 2) for x in sha]} |")
print(f"\nCairn ÷ sha256sum: {hash_s / med(sha):.2f}×  ({1024 / hash_s:.0f} MiB/s)")
r = span("replay")
print(f"\n## Replay of the 1 MiB chain's last step ({steps - 1} reused artifacts checked and hard-linked)\n")
print(f"`cairn replay`, whole command: {med(r) * 1000:.0f} ms (each {[round(x * 1000) for x in r]}), "
      f"{med(r) * 1000 / (steps - 1):.2f} ms per reused step")
PY
