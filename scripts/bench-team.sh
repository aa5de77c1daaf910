#!/usr/bin/env bash
# How fast a team's daemons take over each other's runs (issue 23): two state roots, one
# PostgreSQL registry, a run in flight on the first daemon when it dies. Two ways to die:
#
#   kill     kill -9 of the daemon: the other daemon, on the same host, sees its process is gone
#            and takes the run over at once (no waiting for the lease);
#   pause    SIGSTOP of the daemon, as a host that stops answering: alive, so the other daemon waits
#            for its lease to expire, then takes the run over. The target is lease expiry + < 1 s.
#
# Each figure is read from the registry itself: the run's `lease_expires_at` when the daemon died,
# and the `at` of the run's `run.leased` event and of the resumed step's `step.started`.
#
#   scripts/bench-team.sh
#
# Settings (environment):
#   BENCH_DATABASE=URL    an empty PostgreSQL database (default: one scripts/pg-up.sh makes)
#   BENCH_REPS=5          repetitions of each way
#   BENCH_LEASE=3         --lease-secs of both daemons
#   BENCH_TMP=/tmp        where the state roots are made
set -euo pipefail
cd "$(dirname "$0")/.."
REPS=${BENCH_REPS:-5}
LEASE=${BENCH_LEASE:-3}
TMPBASE=${BENCH_TMP:-/tmp}
CAIRN=$(pwd)/target/release/cairn
log() { printf '==> %s\n' "$*" >&2; }

log "cargo build --release"
cargo build --release -q
if [ -z "${BENCH_DATABASE:-}" ]; then
  BASE=$(scripts/pg-up.sh)
  PGURL=${BASE%/*}
  psql "$PGURL/postgres" -q -c "DROP DATABASE IF EXISTS cairn_bench_team" -c "CREATE DATABASE cairn_bench_team" > /dev/null
  BENCH_DATABASE=$PGURL/cairn_bench_team
fi
WORK=$(mktemp -d -p "$TMPBASE" cairn-bench-team.XXXXXX)
A=$WORK/a
B=$WORK/b
cleanup() {
  for h in "$A" "$B"; do
    pid=$(jq -r .pid "$h/daemon.json" 2> /dev/null || true)
    [ -n "$pid" ] && [ "$pid" != null ] && kill -CONT "$pid" 2> /dev/null || true
    CAIRN_HOME=$h "$CAIRN" daemon stop > /dev/null 2>&1 || true
  done
  rm -rf "$WORK"
}
trap cleanup EXIT

# A run whose first step runs long (it is in flight when its daemon dies) and whose resumed attempt
# is short.
mkdir -p "$WORK/wf/tools"
cat > "$WORK/wf/tools/step.sh" << 'SH'
#!/bin/sh
cat > /dev/null
if [ "$CAIRN_STEP_ID" = slow ] && [ "$CAIRN_ATTEMPT" = 1 ]; then sleep 60; fi
echo '{}'
SH
chmod +x "$WORK/wf/tools/step.sh"
cat > "$WORK/wf/workflow.toml" << 'TOML'
[workflow]
name = "handover"
version = "1.0.0"

[tools.t]
command = ["tools/step.sh"]

[[steps]]
id = "slow"
tool = "t"

[[steps]]
id = "after"
tool = "t"
needs = ["slow"]
TOML
echo '{}' > "$WORK/input.json"

CAIRN_HOME=$A "$CAIRN" daemon start --database "$BENCH_DATABASE" --lease-secs "$LEASE" > /dev/null
CAIRN_HOME=$A "$CAIRN" workflow add "$WORK/wf" --json > /dev/null
CAIRN_HOME=$B "$CAIRN" daemon start --database "$BENCH_DATABASE" --lease-secs "$LEASE" > /dev/null
CAIRN_HOME=$B "$CAIRN" workflow add "$WORK/wf" --json > /dev/null
q() { psql "$BENCH_DATABASE" -tAc "$1"; }
# Waits until the SQL query SQL answers WANT, at most 60 s: a takeover that never happens fails
# the benchmark instead of hanging it.
await_sql() {
  local sql=$1 want=$2 deadline=$((SECONDS + 60))
  until [ "$(q "$sql")" = "$want" ]; do
    if [ "$SECONDS" -ge "$deadline" ]; then
      echo "bench-team: gave up after 60 s waiting for [$sql] to be $want (it is $(q "$sql"))" >&2
      exit 1
    fi
    sleep 0.05
  done
}

: > "$WORK/results.txt"
for way in kill pause; do
  for ((rep = 1; rep <= REPS; rep++)); do
    run=$way-$rep
    CAIRN_HOME=$A "$CAIRN" daemon start --lease-secs "$LEASE" > /dev/null
    pid=$(jq -r .pid "$A/daemon.json")
    url=$(jq -r .url "$A/daemon.json")
    curl -fsS -X POST "$url/runs" -H "Authorization: Bearer $(cat "$A/auth/operator.token")" \
      -H 'content-type: application/json' \
      -d "{\"thread_id\": \"bench\", \"workflow\": \"handover\", \"run_id\": \"$run\", \"input\": {}}" > /dev/null
    await_sql "SELECT count(*) FROM events WHERE run_id = '$run' AND kind = 'step.started'" 1
    sleep 0.3
    died=$(date +%s%3N)
    if [ "$way" = kill ]; then kill -KILL "$pid"; else kill -STOP "$pid"; fi
    expires=$(q "SELECT lease_expires_at FROM workflow_executions WHERE run_id = '$run'")
    await_sql "SELECT count(*) FROM events WHERE run_id = '$run' AND kind = 'step.started' AND step_id = 'slow'" 2
    leased=$(q "SELECT at FROM events WHERE run_id = '$run' AND kind = 'run.leased'")
    resumed=$(q "SELECT max(at) FROM events WHERE run_id = '$run' AND kind = 'step.started' AND step_id = 'slow'")
    echo "$way $rep $died $expires $leased $resumed" >> "$WORK/results.txt"
    log "$way $rep: taken over $((leased - died)) ms after it died ($((leased - expires)) ms after its lease expired); resumed $((resumed - died)) ms after"
    if [ "$way" = pause ]; then kill -CONT "$pid"; fi
    CAIRN_HOME=$A "$CAIRN" daemon stop > /dev/null 2>&1 || true
    await_sql "SELECT status FROM workflow_executions WHERE run_id = '$run'" READY
  done
done

python3 - "$WORK/results.txt" "$LEASE" << 'PY'
import statistics, sys
rows = [l.split() for l in open(sys.argv[1])]
lease = int(sys.argv[2])
print(f"\n## Takeover of a dead daemon's run, lease {lease} s (medians; each rep in brackets)\n")
print("| how it died | died → run.leased | died → step resumed | lease expiry → run.leased | target |")
print("|---|---:|---:|---:|---|")
for way in ("kill", "pause"):
    r = [list(map(int, x[2:])) for x in rows if x[0] == way]
    leased = [l - d for d, e, l, s in r]
    resumed = [s - d for d, e, l, s in r]
    after = [l - e for d, e, l, s in r]
    target = "at once (dead on this host)" if way == "kill" else "< 1000 ms after expiry"
    print(f"| {'kill -9' if way == 'kill' else 'SIGSTOP'} | {statistics.median(leased):.0f} ms {leased} "
          f"| {statistics.median(resumed):.0f} ms {resumed} | {statistics.median(after):.0f} ms {after} | {target} |")
PY
