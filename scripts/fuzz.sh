#!/usr/bin/env bash
# Runs every fuzz target of fuzz/ (cargo-fuzz, libFuzzer) for SECONDS each (default 60) on a copy of
# its seed corpus, and prints what each did: executions, coverage (libFuzzer's `cov:` and `ft:`),
# corpus size and executions per second. Exits non-zero if a target crashed (naming it and the
# input that crashed it) or did not build.
#
#   scripts/fuzz.sh [SECONDS] [TARGET...]
#
# CAIRN_FUZZ_RUNS=N stops each target after N executions instead (SECONDS still bounds it).
# CAIRN_FUZZ_JOBS=N runs N targets at once, each one process (default 1).
# CAIRN_FUZZ_PROFILE=dev builds fuzz/'s dev profile (unoptimised, no debug info): a cold build
# takes a third of the release one's time and runs far slower, which a smoke of a few seconds a
# target can afford (the CI smoke in scripts/test.sh uses it); the default is release.
# Installs cargo-fuzz from crates.io if it is missing, and builds with the nightly toolchain when
# one is installed, else with stable and RUSTC_BOOTSTRAP=1 (cargo-fuzz needs nightly flags).
# Targets are built without a sanitizer (the code is safe Rust: a panic is the crash) and with
# debug assertions, so an overflow crashes too. FUZZING.md has the figures of the long runs.
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$(pwd)

log() { printf '==> %s\n' "$*" >&2; }
die() { printf 'fuzz.sh: %s\n' "$*" >&2; exit 1; }

SECONDS_EACH=${1:-60}
[[ $SECONDS_EACH =~ ^[0-9]+$ && $SECONDS_EACH -gt 0 ]] || die "SECONDS must be a positive whole number, not \`$SECONDS_EACH\`"
shift || true
ALL=(workflow template canonical document notebook plan receipt agent_reply replay validator access)
TARGETS=("$@")
[ ${#TARGETS[@]} -gt 0 ] || TARGETS=("${ALL[@]}")
for t in "${TARGETS[@]}"; do
  [[ " ${ALL[*]} " == *" $t "* ]] || die "no fuzz target \`$t\`; the targets are: ${ALL[*]}"
done
PROFILE=${CAIRN_FUZZ_PROFILE:-release}
case $PROFILE in
  release) PROFILE_FLAG=() ;;
  dev) PROFILE_FLAG=(--dev) ;;
  *) die "CAIRN_FUZZ_PROFILE must be release or dev, not \`$PROFILE\`" ;;
esac
JOBS=${CAIRN_FUZZ_JOBS:-1}
[[ $JOBS =~ ^[1-9][0-9]*$ ]] || die "CAIRN_FUZZ_JOBS must be a positive whole number, not \`$JOBS\`"
RUNS=${CAIRN_FUZZ_RUNS:-}
[[ -z $RUNS || $RUNS =~ ^[0-9]+$ ]] || die "CAIRN_FUZZ_RUNS must be a whole number, not \`$RUNS\`"

command -v cargo >/dev/null || die "cargo is not installed (https://rustup.rs)"
if ! cargo fuzz --version >/dev/null 2>&1; then
  log "installing cargo-fuzz (cargo install --locked cargo-fuzz)"
  cargo install --locked cargo-fuzz
fi
TOOLCHAIN=()
if rustup toolchain list 2>/dev/null | grep -q '^nightly'; then
  TOOLCHAIN=(+nightly)
else
  log "no nightly toolchain: building with stable and RUSTC_BOOTSTRAP=1"
  export RUSTC_BOOTSTRAP=1
fi

# CARGO_TARGET_DIR, when set, is where the targets are built (else fuzz/target).
TARGET_DIR=${CARGO_TARGET_DIR:-$ROOT/fuzz/target}
export CARGO_TARGET_DIR=$TARGET_DIR
log "building ${#TARGETS[@]} fuzz target(s) ($PROFILE profile, no sanitizer, debug assertions on)"
BUILD_START=$(date +%s)
# Without a name `cargo fuzz build` builds every target in one cargo call; with one, only that.
if [ ${#TARGETS[@]} -eq ${#ALL[@]} ]; then
  (cd fuzz && cargo "${TOOLCHAIN[@]}" fuzz build "${PROFILE_FLAG[@]}" --sanitizer none --debug-assertions) ||
    die "the fuzz targets did not build (see above)"
else
  for t in "${TARGETS[@]}"; do
    (cd fuzz && cargo "${TOOLCHAIN[@]}" fuzz build "${PROFILE_FLAG[@]}" --sanitizer none --debug-assertions "$t") ||
      die "fuzz target $t did not build (see above)"
  done
fi
log "built in $(($(date +%s) - BUILD_START)) s"

TRIPLE=$(rustc "${TOOLCHAIN[@]}" -vV | sed -n 's/^host: //p')
BIN="$TARGET_DIR/$TRIPLE/$([ "$PROFILE" = dev ] && echo debug || echo release)"
WORK="$ROOT/fuzz/work"
ARTIFACTS="$ROOT/fuzz/artifacts"
mkdir -p "$WORK" "$ARTIFACTS"

# One target's run, in the background when several run at once: its log is $WORK/<target>.log,
# its exit code and seconds $WORK/<target>.end.
run_target() {
  local t=$1 corpus="$WORK/$1" out="$WORK/$1.log" started code
  # A working copy of the seed corpus: the repository's stays small and unchanged.
  rm -rf "$corpus" && mkdir -p "$corpus" "$ARTIFACTS/$t"
  if [ -d "fuzz/corpus/$t" ]; then cp -r "fuzz/corpus/$t/." "$corpus/"; fi
  local limit=(-max_total_time="$SECONDS_EACH")
  [ -n "$RUNS" ] && limit+=(-runs="$RUNS")
  started=$(date +%s)
  code=0
  nice -n 10 "$BIN/$t" "$corpus" "${limit[@]}" -print_final_stats=1 -timeout=10 -rss_limit_mb=2048 \
    -artifact_prefix="$ARTIFACTS/$t/" >"$out" 2>&1 || code=$?
  echo "$code $(($(date +%s) - started))" >"$WORK/$t.end"
}

for t in "${TARGETS[@]}"; do
  [ -x "$BIN/$t" ] || die "fuzz target $t was not built at $BIN/$t"
  rm -f "$WORK/$t.end"
done
# CAIRN_FUZZ_JOBS targets at a time (default 1: a machine shared with other work keeps a core).
for t in "${TARGETS[@]}"; do
  while [ "$(jobs -rp | wc -l)" -ge "$JOBS" ]; do wait -n || true; done
  run_target "$t" &
done
wait

printf '%-12s %12s %8s %8s %10s %9s %8s\n' target executions cov ft corpus exec/s seconds
failed=()
for t in "${TARGETS[@]}"; do
  out="$WORK/$t.log"
  [ -s "$WORK/$t.end" ] || die "fuzz target $t did not run to its end (see $out)"
  read -r code took <"$WORK/$t.end"
  done_line=$(grep -E '^#[0-9]+[[:space:]]+DONE' "$out" | tail -1 || true)
  [ -n "$done_line" ] || done_line=$(grep -E '^#[0-9]+' "$out" | tail -1 || true)
  field() { sed -n "s/.* $1: \([^ ]*\).*/\1/p" <<<"$done_line"; }
  execs=$(sed -n 's/^stat::number_of_executed_units: //p' "$out")
  rate=$(sed -n 's/^stat::average_exec_per_sec: //p' "$out")
  printf '%-12s %12s %8s %8s %10s %9s %8s\n' "$t" "${execs:-?}" "$(field cov)" "$(field ft)" \
    "$(field corp)" "${rate:-?}" "$took"
  if [ "$code" -ne 0 ]; then
    artifact=$(sed -n 's/.*Test unit written to \(.*\)$/\1/p' "$out" | tail -1)
    grep -E 'panicked at|^SUMMARY|ERROR: libFuzzer' -A3 "$out" | head -20 >&2 || true
    printf 'fuzz target %s CRASHED (exit %s): input %s, log %s\n  reproduce: %s %s\n' \
      "$t" "$code" "${artifact:-(none written)}" "$out" "$BIN/$t" "${artifact:-}" >&2
    failed+=("$t")
  fi
done

if [ ${#failed[@]} -gt 0 ]; then
  die "${#failed[@]} fuzz target(s) crashed: ${failed[*]}"
fi
log "every fuzz target ran ${SECONDS_EACH} s${RUNS:+ (or $RUNS executions)} without a crash"
