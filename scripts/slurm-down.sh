#!/usr/bin/env bash
# slurm-down.sh - stop what slurm-up.sh started, by pid file only (never by name: another Slurm or
# munged on this machine is not ours). Keeps $SLURM_DIR, so a later slurm-up.sh is quick.
set -euo pipefail
D=${SLURM_DIR:-/tmp/cairn-slurm}
# Jobs outlive slurmd (each runs under its own slurmstepd), so cancel them while slurmctld can.
if [ -s "$D/slurmctld.pid" ] && kill -0 "$(cat "$D/slurmctld.pid")" 2>/dev/null; then
  squeue -h -o %i 2>/dev/null | xargs -r scancel 2>/dev/null || true
  for _ in $(seq 50); do [ -z "$(squeue -h -o %i 2>/dev/null)" ] && break; sleep 0.1; done
fi
# slurmdbd after slurmctld (which hands it the last job records), MariaDB after slurmdbd, munge last
# (slurmdbd authenticates through it).
for pf in "$D/slurmd.pid" "$D/slurmctld.pid" "$D/slurmdbd.pid" "$D/mysqld/mysqld.pid" \
          /run/munge/munged.pid; do
  if [ -s "$pf" ] && pid=$(cat "$pf") && kill -0 "$pid" 2>/dev/null; then
    kill -TERM "$pid"
    for _ in $(seq 150); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
    kill -0 "$pid" 2>/dev/null && echo "slurm-down: still running: $pf ($pid)" >&2
  fi
done
true
