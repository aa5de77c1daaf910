#!/usr/bin/env bash
# The book (docs/, mdBook): installs the pinned mdBook once, builds the book, and checks that
# every link in it resolves (scripts/check-links.py). First it proves the checker can fail: a
# mini-book with a dead link and a dead anchor must be refused. `scripts/test.sh` runs this.
#
# Whether the generated reference (docs/src/reference/) is current is a test of the `cli` test
# binary (crates/cairn/tests/cli/reference.rs), run with the rest of the tests; after changing the
# CLI, the API, an MCP tool, the workflow file's keys or an error code, regenerate the pages with
#   CAIRN_BLESS=1 cargo test -p cairn --test cli reference::
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$(pwd)

log() { printf '\n==> %s\n' "$*" >&2; }

# BENCHMARKS.md's summary table is generated from bench-results/ (scripts/bench-table.py --write).
log "BENCHMARKS.md's summary table against bench-results/"
python3 scripts/bench-table.py --check

# mdBook is not in Debian 12: built from crates.io into a local root, once, and again only when
# this pin changes. Without its default features (a writer's `serve` and `watch`, and the search
# index, which the checked book does not need; the HTML renderer stays) and unoptimised, it builds
# in about 80 s on two busy cores (an optimised build takes 140 s) and builds this book in 0.4 s.
MDBOOK_VERSION=0.5.4
MDBOOK_FLAGS=(--locked --no-default-features --debug)
TOOLS=${CAIRN_TOOLS_DIR:-$ROOT/.tools}/mdbook
MDBOOK=$TOOLS/bin/mdbook
PIN="mdbook $MDBOOK_VERSION ${MDBOOK_FLAGS[*]}"
if [ ! -x "$MDBOOK" ] || [ "$(cat "$TOOLS/.installed" 2>/dev/null)" != "$PIN" ]; then
  log "installing $PIN into ${TOOLS#"$ROOT"/}"
  cargo install mdbook --version "$MDBOOK_VERSION" "${MDBOOK_FLAGS[@]}" --root "$TOOLS" --force
  echo "$PIN" >"$TOOLS/.installed"
fi

# The checker must refuse a dead link and a dead anchor, or its passing the book says nothing.
log "the link checker refuses a book with dead links"
MINI=$(mktemp -d)
trap 'rm -rf "$MINI"' EXIT
mkdir -p "$MINI/src"
printf '[book]\ntitle = "mini"\n\n[output.html]\n' >"$MINI/book.toml"
printf '# Summary\n\n- [One](one.md)\n- [Two](two.md)\n' >"$MINI/src/SUMMARY.md"
printf '# One\n\n[two](two.md), [its part](two.md#part), [gone](gone.md), [no part](two.md#nothing)\n' >"$MINI/src/one.md"
printf '# Two\n\n## Part {#part}\n\n[back](one.md#one)\n' >"$MINI/src/two.md"
"$MDBOOK" build "$MINI" >/dev/null 2>&1
if python3 scripts/check-links.py "$MINI/book" >"$MINI/out" 2>&1; then
  cat "$MINI/out" >&2
  echo "the link checker passed a book with dead links" >&2
  exit 1
fi
for dead in "one.html:.*gone.html: no such file" "one.html:.*two.html#nothing: no id \`nothing\`"; do
  if ! grep -q "$dead" "$MINI/out"; then
    cat "$MINI/out" >&2
    echo "the link checker did not report: $dead" >&2
    exit 1
  fi
done
if grep -q "two.html#part\|one.html#one" "$MINI/out"; then
  cat "$MINI/out" >&2
  echo "the link checker refused a link that resolves" >&2
  exit 1
fi

log "mdbook build docs"
"$MDBOOK" build docs
log "the book's links"
python3 scripts/check-links.py docs/book
