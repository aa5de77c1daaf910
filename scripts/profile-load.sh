#!/usr/bin/env bash
# Where the daemon's CPU goes under the load of `scripts/bench-load.sh`: runs the bench, records
# every CPU with `perf record -a --call-graph dwarf` for a few seconds while its runs execute, and
# writes a breakdown (BENCHMARKS.md §18 quotes it):
#
#   - the machine's time by command: the tools (`echo`), the daemon's threads, idle (`swapper`);
#   - the daemon's own samples by the phase of a step they fall in (the first phase whose
#     function is on the sample's stack): the commit of a step's end with the next step's begin,
#     the spawn, the step directory, the slot's hand-off, the watch of the tool, each run's start
#     and end, the HTTP server, ...; and the innermost functions the daemon spends most in.
#
#   scripts/profile-load.sh                 # the default load, two seconds recorded
#
# Settings (environment): those of bench-load.sh (BENCH_CAIRN, BENCH_WORKERS, ...), and
#   PROFILE_AFTER=4       seconds after the bench starts before recording (its runs under way)
#   PROFILE_SECONDS=2     seconds recorded
#   PROFILE_OUT=bench-out/profile-<time>   where perf.data, the stacks and the breakdown go
#
# Needs `perf` (linux-perf) and the right to record every CPU (root, or
# kernel.perf_event_paranoid <= -1). perf's own work slows the load by a few per cent: compare
# breakdowns with each other, and throughput with bench-load.sh alone.
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$(pwd)
AFTER=${PROFILE_AFTER:-4}
SECONDS_RECORDED=${PROFILE_SECONDS:-2}
OUT=${PROFILE_OUT:-$ROOT/bench-out/profile-$(date +%Y%m%dT%H%M%S)}

log() { printf '==> %s\n' "$*" >&2; }
command -v perf > /dev/null || { echo "profile-load needs perf (Debian: linux-perf)" >&2; exit 2; }
command -v jq > /dev/null || { echo "profile-load needs jq" >&2; exit 2; }
mkdir -p "$OUT"

BENCH_TMP=${BENCH_TMP:-/tmp}
export BENCH_TMP
before=$(ls -d "$BENCH_TMP"/cairn-load.* 2> /dev/null || true)
BENCH_OUT="$OUT/bench" scripts/bench-load.sh > "$OUT/bench.log" 2>&1 &
BENCH=$!
# The daemon is the one of the state root this bench made.
PID=
for _ in $(seq 600); do
  for dir in "$BENCH_TMP"/cairn-load.*; do
    case "$before" in *"$dir"*) continue ;; esac
    [ -f "$dir/state/daemon.json" ] && PID=$(jq -r .pid "$dir/state/daemon.json" 2> /dev/null || true)
  done
  [ -n "$PID" ] && break
  sleep 0.1
done
[ -n "$PID" ] || { echo "profile-load: the bench's daemon did not start (see $OUT/bench.log)" >&2; kill "$BENCH" 2> /dev/null; exit 1; }
sleep "$AFTER"
log "recording every CPU for ${SECONDS_RECORDED} s (the daemon is pid $PID)"
perf record -a --call-graph dwarf,16384 -o "$OUT/perf.data" -- sleep "$SECONDS_RECORDED" > /dev/null 2>&1
wait "$BENCH" || { echo "profile-load: the bench failed (see $OUT/bench.log)" >&2; exit 1; }
perf report -i "$OUT/perf.data" --no-children --sort comm --stdio -g none 2> /dev/null |
  grep -v '^#' | grep -v '^$' > "$OUT/by-command.txt"
perf script -i "$OUT/perf.data" --pid "$PID" -F tid,ip,sym 2> /dev/null > "$OUT/daemon-stacks.txt"

python3 - "$OUT" << 'EOF' | tee "$OUT/profile.txt"
import collections, re, sys
out = sys.argv[1]
# The phases of a step, in order: a sample belongs to the first whose pattern is on its stack.
PHASES = [
    ("the commit of a step's end and the next begin", r"commit_steps|commit_before_start"),
    ("the spawn (the child's clone, its exec)", r"Prepared>::spawn|clone_child|Command>::spawn|__do_sys_clone|__spawni"),
    ("the step directory (mkdir)", r"create_dir_all"),
    ("a step slot (waiting, handing over)", r"step_slot|slots::"),
    ("the watch of the tool (pidfd, pipes)", r"Watch|run_admitted|supervise"),
    ("the target's quotas", r"take_target_place|Quotas"),
    ("a run's start (its rows, its directory)", r"Attempts>::steps|Artifacts>::artifacts|placement|claim_run|lay_out|create_checked"),
    ("a run's end (its verdict)", r"finish_with_verdict|finish_run"),
    ("the HTTP server (the bench's requests)", r"hyper::|axum::|tokio::|tower::"),
    ("the scheduler and the attempt", r"attempt_loop|runner::.*schedule|choose_steps|prepare_step|launch_attempt"),
    ("the pool and the service", r"pool::|service::"),
]
machine = {}
for line in open(f"{out}/by-command.txt"):
    parts = line.split()
    if len(parts) >= 2 and parts[0].endswith("%"):
        name = parts[1]
        key = "the daemon" if name.startswith(("cairn", "tokio-rt")) else name
        machine[key] = machine.get(key, 0) + float(parts[0].rstrip("%"))
print("the machine's time by command (% of every CPU's samples):")
for name, share in sorted(machine.items(), key=lambda kv: -kv[1])[:8]:
    print(f"  {share:5.1f} %  {'idle' if name == 'swapper' else name}")
samples, stack = [], None
for line in open(f"{out}/daemon-stacks.txt"):
    line = line.rstrip("\n")
    if not line.strip():
        if stack is not None:
            samples.append(stack)
        stack = None
    elif not line.startswith("\t"):
        # The sample's line (its tid, padded with spaces when short); its frames are indented by
        # a tab.
        stack = []
    elif stack is not None:
        parts = line.strip().split(None, 1)
        stack.append(parts[1] if len(parts) > 1 else parts[0])
if stack:
    samples.append(stack)
n = max(len(samples), 1)
phases = [(name, re.compile(p)) for name, p in PHASES]
counts = collections.Counter()
for s in samples:
    counts[next((name for name, r in phases if any(r.search(f) for f in s)), "other")] += 1
print(f"\nthe daemon's samples ({len(samples)}) by phase:")
for name, _ in PHASES + [("other", None)]:
    print(f"  {100 * counts[name] / n:5.1f} %  {name}")
leaves = collections.Counter(s[0] if s else "?" for s in samples)
print("\nthe innermost functions of the daemon's samples:")
for name, c in leaves.most_common(12):
    print(f"  {100 * c / n:5.1f} %  {name[:100]}")
EOF
grep -E 'throughput|reaches|CPU a step' "$OUT/bench/summary.txt" | sed 's/^/  /'
log "perf.data, the stacks and profile.txt in $OUT"
