#!/usr/bin/env bash
# The procedure-doc index with 1,000 docs (issue 18: search median under 10 ms), end to end:
# `GET /docs/search` through the daemon (a new connection per request, the Viewer token) and the
# whole `cairn doc search QUERY --json` command in-process, for queries from one match to every
# doc; and the reads a reader makes (`GET /docs`, `GET /docs/{name}`), after the docs were saved
# with `POST /docs` (the Operator token). The index alone is `cargo bench -p cairn-store --bench docs`.
#
#   scripts/bench-docs.sh
#
# Settings (environment):
#   BENCH_DOCS=1000     docs saved (about 4 KiB of markdown each, Zipf-distributed words)
#   BENCH_API_REPS=50   timed requests per query (after 5 untimed ones)
#   BENCH_CLI_REPS=20   timed commands per query (after 2 untimed ones)
#   BENCH_TMP=/tmp      where the fresh CAIRN_HOME is made
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$(pwd)
CAIRN=$ROOT/target/release/cairn

log() { printf '==> %s\n' "$*" >&2; }

log "cargo build --release"
cargo build --release -q -p cairn
export CAIRN_HOME
CAIRN_HOME=$(mktemp -d "${BENCH_TMP:-/tmp}/cairn-bench-docs-XXXXXX")
trap '"$CAIRN" daemon stop >/dev/null 2>&1 || true; rm -rf "$CAIRN_HOME"' EXIT
"$CAIRN" daemon start --json >/dev/null

log "load average at the start: $(cut -d' ' -f1-3 /proc/loadavg); commit $(git rev-parse --short HEAD)"
BENCH_CAIRN=$CAIRN python3 - <<'PY'
import http.client, json, os, statistics, subprocess, time

home = os.environ["CAIRN_HOME"]
cairn = os.environ["BENCH_CAIRN"]
docs = int(os.environ.get("BENCH_DOCS", "1000"))
api_reps = int(os.environ.get("BENCH_API_REPS", "50"))
cli_reps = int(os.environ.get("BENCH_CLI_REPS", "20"))
daemon = json.load(open(os.path.join(home, "daemon.json")))
host, port = daemon["url"].removeprefix("http://").split(":")
token = {r: open(os.path.join(home, "auth", f"{r}.token")).read().strip() for r in ("viewer", "operator")}

def request(method, path, role="viewer", body=None):
    """One request on a fresh connection (as curl and the CLI do): (status, body, seconds)."""
    started = time.perf_counter()
    c = http.client.HTTPConnection(host, int(port))
    headers = {"Authorization": f"Bearer {token[role]}"}
    data = None
    if body is not None:
        data = json.dumps(body).encode()
        headers["Content-Type"] = "application/json"
    c.request(method, path, body=data, headers=headers)
    r = c.getresponse()
    payload = r.read()
    c.close()
    return r.status, payload, time.perf_counter() - started

# Deterministic words, Zipf-like over a domain list and a synthetic vocabulary.
vocab = ["the", "data", "derive", "threshold", "from", "new", "then", "filter", "cells", "genes", "pca",
         "clustering", "normalise", "counts", "umap", "quality", "control", "batch", "samples", "model"]
syl = ["ka", "lo", "mi", "ne", "ru", "sa", "ti", "vo", "ze", "pa", "qu", "dr"]
vocab += [f"{syl[i % 12]}{syl[(i // 12) % 12]}{syl[(i // 144) % 12]}{i % 7}" for i in range(3000)]
seed = 0x9E3779B97F4A7C15
def word():
    global seed
    seed = (seed * 6364136223846793005 + 1442695040888963407) % (1 << 64)
    u = (seed >> 11) / float(1 << 53)
    return vocab[min(int(len(vocab) ** u - 1), len(vocab) - 1)]
def sentence(n):
    return " ".join(word() for _ in range(n))
def doc(i):
    text = f"# {sentence(3)} procedure {i}\n\nmarker{i:04} {sentence(40)}.\n"
    for s in range(4):
        text += f"\n## Step {s}: {sentence(3)}\n\n{sentence(60)}.\n\n{sentence(50)}.\n"
    return text + "\n```python\nthreshold = np.percentile(values, 95)\n```\n"

saves = []
started = time.perf_counter()
for i in range(docs):
    status, _, took = request("POST", "/docs", "operator", {"name": f"procedure-{i:04}", "text": doc(i)})
    assert status == 201, status
    saves.append(took)
fill = time.perf_counter() - started
print(f"{docs} docs saved with POST /docs in {fill:.1f} s (median {statistics.median(saves) * 1e3:.2f} ms a save)\n")

def ms(xs):
    xs = sorted(xs)
    return xs[len(xs) // 2] * 1e3, xs[len(xs) * 95 // 100] * 1e3

rare = vocab[300]
queries = [("one doc's marker word", "marker0423"), ("a word in every doc", "threshold"),
           ("two common words", "data filter"), ("a phrase", '"derive the threshold"'),
           ("a prefix", "clust*"), ("a word in a fifth of the docs", rare)]
print("| query | hits | `GET /docs/search` median | p95 | `cairn doc search --json` median | p95 |")
print("|---|---:|---:|---:|---:|---:|")
from urllib.parse import quote
worst = 0.0
for what, q in queries:
    path = f"/docs/search?query={quote(q)}&limit=10"
    for _ in range(5):
        request("GET", path)
    api = []
    for _ in range(api_reps):
        status, body, took = request("GET", path)
        assert status == 200, (status, body)
        api.append(took)
    hits = len(json.loads(body)["results"])
    cli = []
    for n in range(cli_reps + 2):
        t0 = time.perf_counter()
        subprocess.run([cairn, "doc", "search", q, "--json"], check=True, stdout=subprocess.DEVNULL)
        if n >= 2:
            cli.append(time.perf_counter() - t0)
    (am, ap), (cm, cp) = ms(api), ms(cli)
    worst = max(worst, am)
    print(f"| {what} (`{q}`) | {hits} | {am:.2f} ms | {ap:.2f} ms | {cm:.1f} ms | {cp:.1f} ms |")
print()
for what, path in [("`GET /docs` (1,000 summaries)", "/docs"), ("`GET /docs/{name}`", "/docs/procedure-0423"),
                   ("`GET /docs/{name}?render=html`", "/docs/procedure-0423?render=html"), ("`GET /health`", "/health")]:
    for _ in range(5):
        request("GET", path)
    m, p = ms([request("GET", path)[2] for _ in range(api_reps)])
    print(f"{what}: median {m:.2f} ms, p95 {p:.2f} ms")
print(f"\nslowest search median through the API: {worst:.2f} ms; target < 10 ms: {'met' if worst < 10 else 'NOT met'}")
PY
log "load average at the end: $(cut -d' ' -f1-3 /proc/loadavg)"
