#!/usr/bin/env bash
# Installs `cairn` each way docs/src/install.md gives, on this clone, and runs `cairn quickstart`
# (READY, then BLOCKED) from the PATH each install makes, with a fresh state root:
#   1. cargo install --locked --path crates/cairn, into a temporary root;
#   2. the wheel (crates/cairn/pyproject.toml: maturin's binary bindings, linked by zig against
#      glibc 2.17), into a fresh venv with pip and as a uv tool; the binary's glibc requirement
#      is checked;
#   3. scripts/install.sh into a temporary prefix, with its completions and man pages.
# scripts/test.sh calls it; each part prints how long it took.
#
# Every build here is the dev profile in target/, the one the tests use, so CI compiles the
# dependencies once: a user's install builds release (the default of cargo install, install.sh
# and `maturin build --release`), which takes about nine minutes on two cores.
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$(pwd)

log() { printf '\n==> %s\n' "$*" >&2; }
fail() {
  printf 'test-install: FAILED: %s\n' "$*" >&2
  exit 1
}

# The cli tests check the zsh and fish completions with the real shells (crates/cairn/tests/cli/
# install.rs), and this script reads the binary's symbols with objdump.
missing=()
for p in zsh fish; do command -v "$p" >/dev/null || missing+=("$p"); done
command -v objdump >/dev/null || missing+=(binutils)
if [ ${#missing[@]} -gt 0 ]; then
  log "installing ${missing[*]} (the completions' shells; objdump reads the binary's glibc symbols)"
  apt-get update -q && apt-get install -y -q --no-install-recommends "${missing[@]}"
fi

# maturin, ziglang and uv (scripts/requirements-install.txt) in a venv kept under target/, which
# git ignores: created once, reinstalled when the requirements change.
TOOLS=$ROOT/target/venv-install
if [ ! -x "$TOOLS/bin/python" ]; then
  log "creating $TOOLS"
  python3 -m venv "$TOOLS"
fi
if ! cmp -s scripts/requirements-install.txt "$TOOLS/.installed" 2>/dev/null; then
  log "installing maturin, ziglang and uv"
  "$TOOLS/bin/pip" install -q --disable-pip-version-check -r scripts/requirements-install.txt
  cp scripts/requirements-install.txt "$TOOLS/.installed"
fi

TMP=$(mktemp -d "${TMPDIR:-/tmp}/cairn-install-XXXXXX")
HOMES=()
cleanup() {
  # The daemons the quickstarts started, each by its own state root.
  for h in "${HOMES[@]}"; do
    [ -s "$h.bin" ] && CAIRN_HOME=$h "$(cat "$h.bin")" daemon stop >/dev/null 2>&1 || true
  done
  rm -rf "$TMP"
}
trap cleanup EXIT

# elapsed SINCE: seconds from SINCE (a `date +%s`) to now.
elapsed() { echo $(($(date +%s) - $1)); }

# quickstart BINDIR WHAT: `cairn quickstart` as the PATH with BINDIR first finds it, with a fresh
# state root: READY then BLOCKED, exit 0, and no hint to put `cairn` on the PATH (it is there).
quickstart() {
  local bindir=$1 what=$2 home
  home=$(mktemp -d "$TMP/home-XXXXXX")
  HOMES+=("$home")
  local found
  found=$(PATH="$bindir:$PATH" command -v cairn)
  [ "$found" = "$bindir/cairn" ] || fail "$what: the PATH finds $found, not $bindir/cairn"
  printf '%s\n' "$found" >"$home.bin"
  log "$what: cairn quickstart (from $bindir, CAIRN_HOME=$home)"
  local code=0
  (cd "$TMP" && PATH="$bindir:$PATH" CAIRN_HOME=$home cairn quickstart >"$home.out" 2>"$home.err") || code=$?
  if [ $code -ne 0 ] || ! grep -q '^READY: ' "$home.out" || ! grep -q '^BLOCKED: ' "$home.out" ||
    grep -q 'on your PATH' "$home.err"; then
    cat "$home.out" "$home.err" >&2
    fail "$what: cairn quickstart exited $code; expected 0 with READY, then BLOCKED, and no PATH hint"
  fi
  grep -E '^(READY|BLOCKED): ' "$home.out" >&2
}

# glibc_at_most BINARY VERSION: the highest GLIBC_x.y symbol version BINARY needs is VERSION or
# older, so it runs on a login node with that glibc.
glibc_at_most() {
  local need
  need=$(objdump -T "$1" | grep -o 'GLIBC_[0-9][0-9.]*' | sed 's/GLIBC_//' | sort -uV | tail -1)
  [ -n "$need" ] || fail "objdump -T $1 shows no GLIBC symbol version"
  [ "$(printf '%s\n%s\n' "$need" "$2" | sort -V | tail -1)" = "$2" ] ||
    fail "$1 needs glibc $need; the wheel promises $2 (manylinux2014): a dependency's C code or a newer symbol crept in"
  printf 'glibc needed: %s (at most %s)\n' "$need" "$2" >&2
}

# target/ unless the caller shares another (a developer's CARGO_TARGET_DIR); the wheel's build
# for an explicit target triple lands in its own subfolder of it (CAIRN_WHEEL_TARGET_DIR moves it).
export CARGO_TARGET_DIR=${CARGO_TARGET_DIR:-$ROOT/target}
WHEEL_TARGET_DIR=${CAIRN_WHEEL_TARGET_DIR:-$CARGO_TARGET_DIR}

# --- 1. cargo install ------------------------------------------------------------------------
start=$(date +%s)
log "1. cargo install --locked --path crates/cairn (dev profile, target/)"
cargo install --locked --path crates/cairn --root "$TMP/cargo" --profile dev --target-dir "$CARGO_TARGET_DIR"
quickstart "$TMP/cargo/bin" "cargo install"
t_cargo=$(elapsed "$start")

# --- 2. the wheel ----------------------------------------------------------------------------
start=$(date +%s)
target=$(uname -m)-unknown-linux-gnu
log "2. the wheel: maturin build --zig --compatibility manylinux2014 --target $target (dev profile)"
# Built without debug info and incremental state: maturin strips the binary, and nothing reuses
# the rest (232 s instead of 273 s from cold on two busy cores).
CARGO_PROFILE_DEV_DEBUG=0 CARGO_INCREMENTAL=0 CARGO_TARGET_DIR=$WHEEL_TARGET_DIR PATH="$TOOLS/bin:$PATH" \
  "$TOOLS/bin/maturin" build --profile dev --zig --compatibility manylinux2014 \
  --target "$target" -m crates/cairn/Cargo.toml --out "$TMP/wheels"
wheel=$(ls "$TMP"/wheels/cairn_workbench-*-py3-none-manylinux*.whl)
t_wheel_build=$(elapsed "$start")

start=$(date +%s)
python3 -m venv "$TMP/venv"
"$TMP/venv/bin/pip" install -q --disable-pip-version-check --no-index "$wheel"
glibc_at_most "$TMP/venv/bin/cairn" 2.17
quickstart "$TMP/venv/bin" "pip install of the wheel"

# uv's own folders in TMP, offline (the wheel needs nothing else), on the machine's python3.
export UV_TOOL_DIR=$TMP/uv-tools UV_TOOL_BIN_DIR=$TMP/uv-bin UV_CACHE_DIR=$TMP/uv-cache UV_PYTHON_DOWNLOADS=never
"$TOOLS/bin/uv" tool install --offline --python "$(command -v python3)" "$wheel"
quickstart "$TMP/uv-bin" "uv tool install of the wheel"
t_wheel_install=$(elapsed "$start")

# --- 3. scripts/install.sh -------------------------------------------------------------------
start=$(date +%s)
log "3. scripts/install.sh --prefix (dev profile, target/)"
scripts/install.sh --prefix "$TMP/prefix" --profile dev --target-dir "$CARGO_TARGET_DIR"
share=$TMP/prefix/share
for f in bash-completion/completions/cairn zsh/site-functions/_cairn fish/vendor_completions.d/cairn.fish \
  man/man1/cairn.1 man/man1/cairn-run.1 man/man1/cairn-workflow-add.1; do
  [ -s "$share/$f" ] || fail "install.sh left no $share/$f"
done
"$TMP/prefix/bin/cairn" completions bash | cmp -s - "$share/bash-completion/completions/cairn" ||
  fail "the installed bash completion is not what \`cairn completions bash\` prints"
bash -c "source '$share/bash-completion/completions/cairn' && complete -p cairn" >/dev/null ||
  fail "bash does not register the installed completion for cairn"
MANPATH=$share/man man -w cairn-run >/dev/null || fail "man finds no cairn-run page under $share/man"
quickstart "$TMP/prefix/bin" "scripts/install.sh"
t_script=$(elapsed "$start")

log "every install ran the quickstart: cargo install ${t_cargo} s; wheel build ${t_wheel_build} s, pip and uv installs ${t_wheel_install} s; install.sh ${t_script} s"
