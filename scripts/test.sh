#!/usr/bin/env bash
# The whole test suite, from a fresh clone: installs what the tests need, runs every test, and
# stops whatever it started. `.ci/run` runs exactly this.
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$(pwd)

log() { printf '\n==> %s\n' "$*" >&2; }

# --- what the tests need -------------------------------------------------------------------
if ! command -v python3 >/dev/null; then
  log "installing python3 (the example workflow's tools are python3 scripts)"
  apt-get update -q && apt-get install -y -q --no-install-recommends python3 python3-venv
fi

# The replay tests read raw rows with the sqlite3 CLI.
if ! command -v sqlite3 >/dev/null; then
  log "installing sqlite3 (the CLI; tests compare raw registry rows with it)"
  apt-get update -q && apt-get install -y -q --no-install-recommends sqlite3
fi

# The per-sample calling pipeline (crates/cairn/tests/fixtures/pipelines/calling) runs Debian's
# bwa, samtools and bcftools, as a user's variant-calling pipeline does.
if ! command -v bwa >/dev/null || ! command -v samtools >/dev/null || ! command -v bcftools >/dev/null; then
  log "installing bwa, samtools and bcftools (the calling pipeline's tools)"
  apt-get update -q && apt-get install -y -q --no-install-recommends bwa samtools bcftools
fi

# The secrets test keeps one secret in a real external manager: Debian's `pass`, over GnuPG.
if ! command -v pass >/dev/null || ! command -v gpg >/dev/null; then
  log "installing pass and gnupg (the external secret manager the secrets test uses)"
  apt-get update -q && apt-get install -y -q --no-install-recommends pass gnupg
fi

# A local venv DIR for Python packages tests use; created once, reused after, reinstalled when
# the requirements file REQS changed since the last install (a copy of it in DIR/.installed).
venv() {
  local dir=$1 reqs=$2 what=$3
  if [ ! -x "$dir/bin/python" ]; then
    log "creating $dir"
    python3 -m venv "$dir"
  fi
  if [ -s "$reqs" ] && ! cmp -s "$reqs" "$dir/.installed" 2>/dev/null; then
    log "installing $what"
    "$dir/bin/pip" install -q --disable-pip-version-check -r "$reqs"
    cp "$reqs" "$dir/.installed"
  fi
}
venv "$ROOT/.venv" scripts/requirements-test.txt "Python test packages"
export CAIRN_TEST_VENV="$ROOT/.venv"
# Snakemake 8 beside the pinned 9, in a venv of its own: the pipeline tests read its log too.
venv "$ROOT/.venv-snakemake8" scripts/requirements-snakemake8.txt "Snakemake 8"
export CAIRN_TEST_SNAKEMAKE8="$ROOT/.venv-snakemake8"

# `npm ci` in DIR when its package-lock.json changed since the last install (a marker in
# node_modules), installing npm first if the machine has none.
npm_ci() {
  local dir=$1 what=$2
  shift 2
  cmp -s "$dir/package-lock.json" "$dir/node_modules/.installed" 2>/dev/null && return 0
  if ! command -v npm >/dev/null; then
    log "installing npm ($what comes from the npm registry)"
    apt-get update -q && apt-get install -y -q --no-install-recommends npm
  fi
  log "installing $what (npm ci in ${dir#"$ROOT"/})"
  (cd "$dir" && npm ci --no-audit --no-fund --loglevel=error "$@")
  cp "$dir/package-lock.json" "$dir/node_modules/.installed"
}

# The official MCP conformance suite and the Node 22 it runs on, pinned in
# tools/mcp-conformance/package-lock.json.
npm_ci "$ROOT/tools/mcp-conformance" "the MCP conformance suite" --engine-strict=false
# Its first release with the 2026-07-28 requirements, pinned in tools/mcp-conformance-2026.
npm_ci "$ROOT/tools/mcp-conformance-2026" "the MCP conformance suite for 2026-07-28" --engine-strict=false

# The web app's browser test (crates/cairn/tests/cli/webapp.rs) drives Debian's chromium headless
# through playwright-core (no browser download), with axe-core; both pinned in
# tools/webapp-e2e/package-lock.json.
if [ ! -x /usr/bin/chromium ]; then
  log "installing chromium (the web app's browser test drives it headless)"
  apt-get update -q && apt-get install -y -q --no-install-recommends chromium
fi
npm_ci "$ROOT/tools/webapp-e2e" "the browser test's packages"

# Services: for the target tests a private sshd on 127.0.0.1:2222 (installs openssh-server if
# needed) and a single-node Slurm on loopback with accounting, for sacct (installs slurm, munge,
# slurmdbd and mariadb-server if needed); for the PostgreSQL registry's tests a private
# PostgreSQL 15 on 127.0.0.1:5433 (installs postgresql-15 if needed; its URL is exported as
# CAIRN_TEST_DATABASE_URL). The tests that need them fail, not skip, without them; so does this
# script.
SSHD_DIR=${SSHD_DIR:-/tmp/cairn-sshd}
SLURM_DIR=${SLURM_DIR:-/tmp/cairn-slurm}
running() { [ -s "$1" ] && kill -0 "$(cat "$1")" 2>/dev/null; }
SSHD_WAS_RUNNING=no; running "$SSHD_DIR/sshd.pid" && SSHD_WAS_RUNNING=yes
SLURM_WAS_RUNNING=no; running "$SLURM_DIR/slurmctld.pid" && SLURM_WAS_RUNNING=yes
PG_DIR=${PG_DIR:-/tmp/cairn-pg}
PG_WAS_RUNNING=no
[ -s "$PG_DIR/data/postmaster.pid" ] && kill -0 "$(head -1 "$PG_DIR/data/postmaster.pid")" 2>/dev/null && PG_WAS_RUNNING=yes

# Tests start daemons (each on its own temporary state root, and each exits when its root is
# removed) and ssh control connections; this stops any a crashed test run left behind, and the
# sshd and Slurm if this script started them.
cleanup() {
  pkill -f -- "--home ${TMPDIR:-/tmp}/cairn-home-" 2>/dev/null || true
  pkill -f -- "ControlPath=${TMPDIR:-/tmp}/cairn-home-" 2>/dev/null || true
  if [ "$SSHD_WAS_RUNNING" = no ] && [ -s "$SSHD_DIR/sshd.pid" ]; then
    kill "$(cat "$SSHD_DIR/sshd.pid")" 2>/dev/null || true
  fi
  if [ "$SLURM_WAS_RUNNING" = no ]; then SLURM_DIR=$SLURM_DIR scripts/slurm-down.sh >/dev/null 2>&1 || true; fi
  if [ "$PG_WAS_RUNNING" = no ]; then PG_DIR=$PG_DIR scripts/pg-down.sh >/dev/null 2>&1 || true; fi
}
trap cleanup EXIT

log "sshd for the SSH target tests"
SSHD_DIR=$SSHD_DIR scripts/sshd-up.sh >/dev/null
export CAIRN_TEST_SSHD_DIR="$SSHD_DIR"
log "Slurm for the Slurm target tests"
SLURM_DIR=$SLURM_DIR scripts/slurm-up.sh >/dev/null
export CAIRN_TEST_SLURM=1
log "PostgreSQL for the PostgreSQL registry's tests"
CAIRN_TEST_DATABASE_URL=$(PG_DIR=$PG_DIR scripts/pg-up.sh)
export CAIRN_TEST_DATABASE_URL

# --- checks and tests ----------------------------------------------------------------------
log "cargo fmt --check"
cargo fmt --all -- --check

# Every crate's lints, tests and benches included (the workspace's default member is only the
# binary, so --workspace is needed for the rest).
log "cargo clippy"
cargo clippy --workspace --all-targets -- -D warnings

# Every fuzz target of fuzz/ (FUZZING.md) for 10 s from its seed corpus, so a target that no
# longer builds, or that crashes at once, fails the suite (before the tests, whose summary stays
# the last thing printed). The unoptimised dev profile builds in half the time of opt-level 1, and
# two targets run at once: about 2.5 minutes from a cold fuzz/target.
log "fuzz smoke: scripts/fuzz.sh 10"
CAIRN_FUZZ_PROFILE=dev CAIRN_FUZZ_JOBS=2 scripts/fuzz.sh 10

# The book: built with a pinned mdBook, every link and anchor in it checked.
scripts/test-docs.sh

# Installs `cairn` each way a user does and runs the quickstart from each PATH; before the tests,
# whose completion tests use the shells it installs.
scripts/test-install.sh

# The insta snapshots of the human output (crates/cairn/tests/cli/snapshots.rs) are compared,
# never written: a mismatch fails (CI=true alone does that; this says it whatever the environment).
export INSTA_UPDATE=no INSTA_FORCE_PASS=0

# One build profile for everything; nextest when present (it ships on these machines).
log "tests"
if cargo nextest --version >/dev/null 2>&1; then
  cargo nextest run --workspace --no-fail-fast
  # nextest does not run doctests
  cargo test --workspace --doc -q
else
  cargo test --workspace --no-fail-fast
fi
