#!/usr/bin/env bash
# Builds `cairn` from this checkout and installs it, with its shell completions and man pages,
# under a prefix (default ~/.local): PREFIX/bin/cairn, the bash, zsh and fish completions under
# PREFIX/share, and one man page a command in PREFIX/share/man/man1. For those who install
# neither with cargo nor with the wheel (docs/src/install.md has every way).
#
#   scripts/install.sh [--prefix DIR] [--profile release|dev] [--target-dir DIR]
#
# It is `cargo install --locked --path crates/cairn --root PREFIX` underneath: the release build
# takes about nine minutes on two cores. CI passes `--profile dev --target-dir target` to reuse
# the tests' build (scripts/test-install.sh).
set -euo pipefail
cd "$(dirname "$0")/.."

usage() {
  sed -n '2,/^set -euo/{/^#/s/^# \{0,1\}//p}' "$0" >&2
}
fail() {
  printf 'install.sh: %s\n' "$*" >&2
  exit 2
}

PREFIX=${HOME:?install.sh: HOME is not set; give --prefix DIR}/.local
PROFILE=release
TARGET_DIR=
while [ $# -gt 0 ]; do
  case $1 in
    --prefix) [ $# -ge 2 ] || fail "--prefix needs a folder"; PREFIX=$2; shift 2 ;;
    --prefix=*) PREFIX=${1#*=}; shift ;;
    --profile) [ $# -ge 2 ] || fail "--profile needs a cargo profile (release or dev)"; PROFILE=$2; shift 2 ;;
    --profile=*) PROFILE=${1#*=}; shift ;;
    --target-dir) [ $# -ge 2 ] || fail "--target-dir needs a folder"; TARGET_DIR=$2; shift 2 ;;
    --target-dir=*) TARGET_DIR=${1#*=}; shift ;;
    -h | --help) usage; exit 0 ;;
    *) usage; fail "unknown argument \`$1\`" ;;
  esac
done
[ -n "$PREFIX" ] || fail "--prefix is empty; give the folder to install under (default ~/.local)"
command -v cargo >/dev/null ||
  fail "cargo is not on the PATH: install Rust (rustup, https://rustup.rs), then run this again"
mkdir -p "$PREFIX" || fail "cannot create the prefix $PREFIX; give --prefix a folder you can write"
PREFIX=$(cd "$PREFIX" && pwd)

args=(install --locked --force --path crates/cairn --root "$PREFIX" --profile "$PROFILE")
[ -z "$TARGET_DIR" ] || args+=(--target-dir "$TARGET_DIR")
printf '==> cargo %s\n' "${args[*]}" >&2
cargo "${args[@]}"

bin="$PREFIX/bin/cairn"
[ -x "$bin" ] || fail "cargo install left no $bin"
share="$PREFIX/share"
mkdir -p "$share/bash-completion/completions" "$share/zsh/site-functions" \
  "$share/fish/vendor_completions.d" "$share/man/man1"
"$bin" completions bash >"$share/bash-completion/completions/cairn"
"$bin" completions zsh >"$share/zsh/site-functions/_cairn"
"$bin" completions fish >"$share/fish/vendor_completions.d/cairn.fish"
pages=$("$bin" man --out "$share/man/man1" 2>/dev/null | wc -l)

cat >&2 <<EOF

Installed $("$bin" --version) into $PREFIX:
  $bin
  completions: $share/bash-completion/completions/cairn
               $share/zsh/site-functions/_cairn
               $share/fish/vendor_completions.d/cairn.fish
  man pages:   $pages in $share/man/man1 (man cairn, man cairn-run, ...)
EOF

# Where each shell looks: bash-completion reads ~/.local/share/bash-completion, fish reads
# ~/.local/share/fish/vendor_completions.d, man-db finds PREFIX/share/man from PREFIX/bin on the
# PATH; zsh reads only its fpath.
notes=()
case ":$PATH:" in
  *":$PREFIX/bin:"*)
    found=$(command -v cairn || true)
    if [ -n "$found" ] && [ "$found" != "$bin" ]; then
      notes+=("the PATH finds another cairn first: $found (remove it, or put $PREFIX/bin before it)")
    fi
    ;;
  *) notes+=("$PREFIX/bin is not on your PATH: add to ~/.bashrc (or your shell's profile)
      export PATH=\"$PREFIX/bin:\$PATH\"") ;;
esac
notes+=("zsh: add to ~/.zshrc, before compinit:  fpath=(\"$share/zsh/site-functions\" \$fpath)")
if [ "$PREFIX" != "$HOME/.local" ]; then
  notes+=("bash and fish load completions from ~/.local/share by themselves; from this prefix, source
      $share/bash-completion/completions/cairn in ~/.bashrc, and add
      $share/fish/vendor_completions.d to \$fish_complete_path")
fi
printf '\n' >&2
for n in "${notes[@]}"; do printf -- '- %s\n' "$n" >&2; done
printf '\nThen try: cairn quickstart\n' >&2
