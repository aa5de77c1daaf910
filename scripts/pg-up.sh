#!/usr/bin/env bash
# pg-up.sh - a private PostgreSQL 15 on 127.0.0.1:5433 for the PostgreSQL registry's tests (initdb +
# pg_ctl, no systemd; installs Debian's postgresql-15 if needed). Idempotent: reuses the data
# directory, starts the server only if it is not running, creates the database only if missing.
# Prints the database's URL (CAIRN_TEST_DATABASE_URL) last.
#
#   PG_DIR=/tmp/cairn-pg  PG_PORT=5433  PG_DB=cairn_test  PG_FSYNC=off
#
# PG_FSYNC=off (the default, for tests: the tests kill Cairn's daemons, never the server) makes the
# server skip its own fsyncs; PG_FSYNC=on for benchmarks that compare durable commits.
set -euo pipefail
D=${PG_DIR:-/tmp/cairn-pg}
PORT=${PG_PORT:-5433}
DB=${PG_DB:-cairn_test}
FSYNC=${PG_FSYNC:-off}
B=/usr/lib/postgresql/15/bin
[ -x "$B/initdb" ] || {
  apt-get update -q
  apt-get install -y -q --no-install-recommends postgresql-15 postgresql-client-15
}
as_pg() { runuser -u postgres -- "$@"; }
install -d -o postgres -g postgres -m 0700 "$D"
if [ ! -s "$D/data/PG_VERSION" ]; then
  as_pg "$B/initdb" -D "$D/data" -U postgres --auth=trust -E UTF8 --no-locale > "$D/initdb.log"
fi
# A server started with another fsync setting is restarted with this one.
if as_pg "$B/pg_ctl" -D "$D/data" status > /dev/null 2>&1; then
  running=$(as_pg psql -h "$D" -p "$PORT" -d postgres -tAc "SHOW fsync" 2>/dev/null || true)
  [ "$running" = "$FSYNC" ] || as_pg "$B/pg_ctl" -D "$D/data" -m fast -w stop > /dev/null
fi
if ! as_pg "$B/pg_ctl" -D "$D/data" status > /dev/null 2>&1; then
  # Loopback only; its socket in $D. max_connections: every test daemon holds a few.
  as_pg "$B/pg_ctl" -D "$D/data" -l "$D/server.log" -w -t 30 start -o \
    "-c listen_addresses=127.0.0.1 -p $PORT -k $D -c max_connections=400 -c fsync=$FSYNC -c synchronous_commit=$FSYNC -c full_page_writes=$FSYNC" > /dev/null
fi
export PGHOST=127.0.0.1 PGPORT=$PORT PGUSER=postgres
psql -d postgres -tAc "SELECT 1 FROM pg_database WHERE datname='$DB'" | grep -q 1 || createdb "$DB"
echo "postgres://postgres@127.0.0.1:$PORT/$DB"
