#!/usr/bin/env bash
# pg-down.sh - stops the PostgreSQL server scripts/pg-up.sh started (its data directory stays).
set -euo pipefail
D=${PG_DIR:-/tmp/cairn-pg}
if [ -s "$D/data/postmaster.pid" ]; then
  runuser -u postgres -- /usr/lib/postgresql/15/bin/pg_ctl -D "$D/data" -m fast -w stop > /dev/null
fi
