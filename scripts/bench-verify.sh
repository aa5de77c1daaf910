#!/usr/bin/env bash
# `cairn verify` against its peers on the same 6-cell notebook (issue 4, "Performance"): wall time
# of the whole command, medians over N runs, in one run of this script; the scratch kernel's peak
# RSS against a bare ipykernel's; and the time from a kernel SIGKILL to the `died` verdict.
#
#   scripts/bench-verify.sh
#
# Settings (environment):
#   BENCH_N=7           timed runs of each command (after one untimed warm-up); medians reported
#   BENCH_VENV=.venv    the venv with ipykernel, nbconvert (and papermill, installed if missing)
#   BENCH_TMP=/tmp      where the work directory (documents, CAIRN_HOME, outputs) is made
#   BENCH_KEEP=0        1 keeps the work directory
#
# What is timed, each as one whole process from spawn to exit (interpreter start-up included):
#   spare     target/release/cairn verify doc.md           through the daemon, on its spare kernel
#   cairn     target/release/cairn verify doc.md --no-spare  a kernel started for it (a cold start)
#             (CAIRN_PYTHON = the venv's python for both)
#   papermill papermill in.ipynb out.ipynb -k python3      (the venv's python3 kernelspec)
#   nbconvert jupyter nbconvert --to notebook --execute in.ipynb
#   bare      python -c 'start_new_kernel(); shutdown'     (jupyter_client, no cells)
# All kernels are the venv's python with the venv's kernelspec (JUPYTER_PATH=<venv>/share/jupyter).
#
# The spare: a daemon (`cairn daemon start`) keeps one kernel booted; before each timed spare run
# the script waits (untimed) until `GET /kernel/spare` says ready, as a person's next verification
# finds it after any pause longer than a kernel's start. "spare, back to back" is a second
# verification started the moment the first ended: the spare is then still booting, and waited for.
#
# Peak RSS: the 6th cell prints the kernel's VmHWM (/proc/self/status) just before the end; the
# bare figure runs the same 6 cells in a kernel from jupyter_client's start_new_kernel.
#
# SIGKILL → died: a document whose 2nd cell runs os.kill(os.getpid(), 9); the figure is the
# duration_ms cairn reports for that cell (request sent → death observed). The "kill → exit"
# column bounds it from above: from the timestamp the cell takes right before the kill to the
# cairn process's exit (verdict, draft written, process gone).
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$(pwd)

N=${BENCH_N:-7}
VENV=$(cd "${BENCH_VENV:-$ROOT/.venv}" && pwd)
TMPBASE=${BENCH_TMP:-/tmp}
CAIRN=$ROOT/target/release/cairn
PY=$VENV/bin/python

log() { printf '==> %s\n' "$*" >&2; }

[ -x "$PY" ] || { echo "no venv at $VENV (run scripts/test.sh first)" >&2; exit 2; }
"$PY" -c 'import ipykernel, nbconvert, jupyter_client' 2>/dev/null \
  || { echo "$VENV lacks ipykernel/nbconvert (run scripts/test.sh)" >&2; exit 2; }
if ! "$PY" -c 'import papermill' 2>/dev/null; then
  log "installing papermill into $VENV"
  "$VENV/bin/pip" install -q --disable-pip-version-check papermill
fi

log "cargo build --release"
cargo build --release -q -p cairn

WORK=$(mktemp -d -p "$TMPBASE" cairn-bench-verify.XXXXXX)
if [ "${BENCH_KEEP:-0}" = 1 ]; then log "work directory: $WORK"; else trap 'rm -rf "$WORK"' EXIT; fi

# Everything below uses the venv's Jupyter, kernelspec and a private runtime directory; no user
# plugins (CAIRN_CONFIG is an empty directory) and no user IPython profile.
export JUPYTER_PATH=$VENV/share/jupyter
export JUPYTER_RUNTIME_DIR=$WORK/jupyter-runtime
export JUPYTER_PLATFORM_DIRS=1
export IPYTHONDIR=$WORK/ipython
export CAIRN_CONFIG=$WORK/empty-config
export CAIRN_HOME=$WORK/cairn-home
export CAIRN_PYTHON=$PY
mkdir -p "$JUPYTER_RUNTIME_DIR" "$IPYTHONDIR" "$CAIRN_CONFIG" "$WORK/out"
[ -f "$JUPYTER_PATH/kernels/python3/kernel.json" ] \
  || "$PY" -m ipykernel install --prefix "$VENV" --name python3 >/dev/null

# --- the documents --------------------------------------------------------------------------
"$PY" - "$WORK" <<'EOF'
import json, sys
work = sys.argv[1]
cells = [
    "import math, random, statistics",
    "random.seed(7)\nxs = [random.gauss(0.0, 1.0) for _ in range(2000)]",
    "mean, sd = statistics.fmean(xs), statistics.stdev(xs)\nprint(round(mean, 4), round(sd, 4))",
    "primes = [n for n in range(2, 3000) if all(n % p for p in range(2, math.isqrt(n) + 1))]\nprint(len(primes))",
    "total = sum(math.sqrt(p) for p in primes)\nassert total > 0\nprint(round(total, 3))",
    "print([l for l in open('/proc/self/status') if l.startswith('VmHWM')][0].strip())",
]
with open(f"{work}/doc.md", "w") as f:
    f.write("# Six cells\n\nSmall numeric cells, standard library only.\n\n")
    f.write("\n\n".join(f"```python\n{c}\n```" for c in cells) + "\n")
nb = {
    "nbformat": 4, "nbformat_minor": 5,
    "metadata": {"kernelspec": {"name": "python3", "display_name": "Python 3 (ipykernel)", "language": "python"},
                 "language_info": {"name": "python"}},
    "cells": [{"id": "md", "cell_type": "markdown", "metadata": {}, "source": "# Six cells"}] + [
        {"id": f"c{i}", "cell_type": "code", "metadata": {}, "execution_count": None, "outputs": [], "source": c}
        for i, c in enumerate(cells)],
}
json.dump(nb, open(f"{work}/in.ipynb", "w"), indent=1)
json.dump(cells, open(f"{work}/cells.json", "w"))
with open(f"{work}/kill.md", "w") as f:
    f.write("```python\nx = 1\n```\n\n```python\nimport os, time\n"
            f"open({work + '/killed-at'!r}, 'w').write(str(time.time_ns()))\n"
            "os.kill(os.getpid(), 9)\n```\n\n```python\ny = 2\n```\n")
EOF

# A bare kernel through jupyter_client: `start` starts and shuts it down; `rss` runs the 6 cells
# and prints the VmHWM line the last one prints.
cat > "$WORK/bare.py" <<'EOF'
import json, sys, time
from jupyter_client.manager import start_new_kernel
mode, cells = sys.argv[1], json.load(open(sys.argv[2]))
t0 = time.perf_counter()
km, kc = start_new_kernel(kernel_name="python3")
t1 = time.perf_counter()
out = []
if mode == "rss":
    for code in cells:
        def hook(msg):
            if msg["msg_type"] == "stream":
                out.append(msg["content"]["text"])
        reply = kc.execute_interactive(code, timeout=60, output_hook=hook)
        assert reply["content"]["status"] == "ok", reply["content"]
kc.stop_channels()
km.shutdown_kernel()
t2 = time.perf_counter()
line = next((l for l in "".join(out).splitlines() if l.startswith("VmHWM")), "")
print(json.dumps({"ready_ms": (t1 - t0) * 1e3, "shutdown_ms": (t2 - t1) * 1e3, "vmhwm": line}))
EOF

# --- helpers --------------------------------------------------------------------------------
now() { echo "$EPOCHREALTIME"; }
elapsed_ms() { "$PY" -c "import sys; print(round((float(sys.argv[2]) - float(sys.argv[1])) * 1000, 1))" "$1" "$2"; }
median() { "$PY" -c "import statistics, sys; print(round(statistics.median(float(x) for x in sys.argv[1:]), 1))" "$@"; }
# VmHWM (kB) printed by the 6th cell of a notebook.
nb_vmhwm() {
  "$PY" - "$1" <<'EOF'
import json, re, sys
nb = json.load(open(sys.argv[1]))
for c in nb["cells"]:
    for o in c.get("outputs", []):
        t = o.get("text", "")
        t = "".join(t) if isinstance(t, list) else t
        m = re.search(r"VmHWM:\s+(\d+) kB", t)
        if m:
            print(m.group(1)); sys.exit()
sys.exit("no VmHWM line in " + sys.argv[1])
EOF
}
json_field() { "$PY" -c "import json, sys; v = json.load(open(sys.argv[1])); print(eval(sys.argv[2], {}, {'v': v}))" "$1" "$2"; }

run_cairn() { # out.json
  "$CAIRN" verify "$WORK/doc.md" --no-spare --json > "$1" 2> "$WORK/out/cairn.err"
}
run_spare() { # out.json
  "$CAIRN" verify "$WORK/doc.md" --json > "$1" 2> "$WORK/out/spare.err"
}
spare_ready() { # waits until the daemon's spare is ready
  "$PY" - "$CAIRN_HOME" <<'EOF'
import json, sys, time, urllib.request
home = sys.argv[1]
url = json.load(open(f"{home}/daemon.json"))["url"] + "/kernel/spare"
token = open(f"{home}/auth/viewer.token").read().strip()
deadline = time.time() + 60
while time.time() < deadline:
    req = urllib.request.Request(url, headers={"Authorization": f"Bearer {token}"})
    if json.load(urllib.request.urlopen(req))["state"] == "ready":
        sys.exit(0)
    time.sleep(0.02)
sys.exit("the daemon's spare kernel never became ready")
EOF
}
kernel_start() { json_field "$1" "v['kernel']['start']"; }
run_papermill() { # out.ipynb
  "$VENV/bin/papermill" "$WORK/in.ipynb" "$1" -k python3 --no-progress-bar --log-level ERROR \
    > /dev/null 2> "$WORK/out/papermill.err"
}
run_nbconvert() { # out basename
  "$VENV/bin/jupyter" nbconvert --to notebook --execute "$WORK/in.ipynb" --output-dir "$WORK/out" --output "$1" \
    > /dev/null 2> "$WORK/out/nbconvert.err"
}
run_bare() { # mode out.json
  "$PY" "$WORK/bare.py" "$1" "$WORK/cells.json" > "$2" 2> "$WORK/out/bare.err"
}

declare -a T_SPARE T_B2B T_CAIRN T_PM T_NBC T_BARE BARE_READY RSS_CAIRN RSS_PM RSS_NBC RSS_BARE KILL_MS KILL_EXIT

log "starting the daemon (it keeps the spare kernel)"
"$CAIRN" daemon start > /dev/null
if [ "${BENCH_KEEP:-0}" = 1 ]; then trap '"$CAIRN" daemon stop >/dev/null 2>&1 || true' EXIT
else trap '"$CAIRN" daemon stop >/dev/null 2>&1 || true; rm -rf "$WORK"' EXIT; fi
spare_ready

log "warm-up (one untimed run of each)"
run_spare "$WORK/out/warm-spare.json"
run_cairn "$WORK/out/warm.json"
run_papermill "$WORK/out/warm-pm.ipynb"
run_nbconvert warm-nbc
run_bare start "$WORK/out/warm-bare.json"

log "timing, N=$N (interleaved: spare, spare back to back, cairn cold, papermill, nbconvert, bare kernel)"
for ((i = 1; i <= N; i++)); do
  spare_ready
  s=$(now); run_spare "$WORK/out/spare-$i.json"; e=$(now)
  T_SPARE+=("$(elapsed_ms "$s" "$e")")
  [ "$(kernel_start "$WORK/out/spare-$i.json")" = pre_started ] || { echo "spare run $i did not run on the spare" >&2; exit 1; }
  s=$(now); run_spare "$WORK/out/b2b-$i.json"; e=$(now)
  T_B2B+=("$(elapsed_ms "$s" "$e")")
  [ "$(json_field "$WORK/out/b2b-$i.json" "v['verdict']")" = passed ] || { echo "back-to-back run $i did not pass" >&2; exit 1; }

  s=$(now); run_cairn "$WORK/out/cairn-$i.json"; e=$(now)
  T_CAIRN+=("$(elapsed_ms "$s" "$e")")
  [ "$(json_field "$WORK/out/cairn-$i.json" "v['verdict']")" = passed ] || { echo "cairn run $i did not pass" >&2; exit 1; }
  RSS_CAIRN+=("$(nb_vmhwm "$(json_field "$WORK/out/cairn-$i.json" "v['notebook']")")")

  s=$(now); run_papermill "$WORK/out/pm-$i.ipynb"; e=$(now)
  T_PM+=("$(elapsed_ms "$s" "$e")"); RSS_PM+=("$(nb_vmhwm "$WORK/out/pm-$i.ipynb")")

  s=$(now); run_nbconvert "nbc-$i"; e=$(now)
  T_NBC+=("$(elapsed_ms "$s" "$e")"); RSS_NBC+=("$(nb_vmhwm "$WORK/out/nbc-$i.ipynb")")

  s=$(now); run_bare start "$WORK/out/bare-$i.json"; e=$(now)
  T_BARE+=("$(elapsed_ms "$s" "$e")"); BARE_READY+=("$(json_field "$WORK/out/bare-$i.json" "round(v['ready_ms'], 1)")")

  run_bare rss "$WORK/out/bare-rss-$i.json"
  RSS_BARE+=("$(json_field "$WORK/out/bare-rss-$i.json" "v['vmhwm'].split()[1]")")
  printf '   run %d: spare %s ms, back to back %s ms, cairn %s ms, papermill %s ms, nbconvert %s ms, bare kernel %s ms\n' \
    "$i" "${T_SPARE[-1]}" "${T_B2B[-1]}" "${T_CAIRN[-1]}" "${T_PM[-1]}" "${T_NBC[-1]}" "${T_BARE[-1]}" >&2
done

log "SIGKILL → died, N=$N"
for ((i = 1; i <= N; i++)); do
  set +e
  "$CAIRN" verify "$WORK/kill.md" --no-spare --json > "$WORK/out/kill-$i.json" 2> "$WORK/out/kill.err"
  rc=$?
  e=$(now)
  set -e
  [ "$rc" = 1 ] && [ "$(json_field "$WORK/out/kill-$i.json" "v['verdict']")" = died ] \
    || { echo "kill run $i: exit $rc, not died" >&2; cat "$WORK/out/kill-$i.json" >&2; exit 1; }
  KILL_MS+=("$(json_field "$WORK/out/kill-$i.json" "v['cells'][1]['duration_ms']")")
  killed_at=$(cat "$WORK/killed-at")
  KILL_EXIT+=("$("$PY" -c "import sys; print(round(float(sys.argv[2]) * 1000 - int(sys.argv[1]) / 1e6, 1))" "$killed_at" "$e")")
done

# --- report ---------------------------------------------------------------------------------
ms=$(median "${T_SPARE[@]}"); mbb=$(median "${T_B2B[@]}")
mc=$(median "${T_CAIRN[@]}"); mp=$(median "${T_PM[@]}"); mn=$(median "${T_NBC[@]}"); mb=$(median "${T_BARE[@]}")
mbr=$(median "${BARE_READY[@]}")
rc_=$(median "${RSS_CAIRN[@]}"); rp=$(median "${RSS_PM[@]}"); rn=$(median "${RSS_NBC[@]}"); rb=$(median "${RSS_BARE[@]}")
km=$(median "${KILL_MS[@]}"); ke=$(median "${KILL_EXIT[@]}")
ratio() { "$PY" -c "import sys; print(f'{float(sys.argv[1]) / float(sys.argv[2]):.2f}')" "$1" "$2"; }
pct() { "$PY" -c "import sys; print(f'{(float(sys.argv[1]) / float(sys.argv[2]) - 1) * 100:+.1f} %')" "$1" "$2"; }
ok() { if "$PY" -c "import sys; sys.exit(0 if eval(sys.argv[1]) else 1)" "$1"; then echo yes; else echo NO; fi; }

versions=$("$PY" -c "
from importlib.metadata import version as v
import platform
print(f'python {platform.python_version()}, ipykernel {v(\"ipykernel\")}, jupyter_client {v(\"jupyter_client\")}, nbconvert {v(\"nbconvert\")}, nbclient {v(\"nbclient\")}, papermill {v(\"papermill\")}')")

cat <<EOF

## cairn verify vs peers — 6-cell notebook, medians of N=$N (wall time of the whole command)

machine: $(nproc) CPUs, $(lscpu | grep 'Model name' | sed 's/Model name: *//'), $(uname -r); load average at the end: $(cut -d' ' -f1-3 /proc/loadavg)
$versions
cairn: $("$CAIRN" --version 2>/dev/null || echo "release build") (target/release/cairn)

| command | median ms | runs (ms) | ratio to cairn |
|---|---:|---|---:|
| cairn verify doc.md, through the daemon on its spare kernel | $ms | ${T_SPARE[*]} | $(ratio "$ms" "$mc") |
| the same, back to back (the spare still booting) | $mbb | ${T_B2B[*]} | $(ratio "$mbb" "$mc") |
| cairn verify doc.md --no-spare (a cold start) | $mc | ${T_CAIRN[*]} | 1.00 |
| papermill in.ipynb out.ipynb | $mp | ${T_PM[*]} | $(ratio "$mp" "$mc") |
| jupyter nbconvert --to notebook --execute | $mn | ${T_NBC[*]} | $(ratio "$mn" "$mc") |
| bare ipykernel start + shutdown (jupyter_client, whole process) | $mb | ${T_BARE[*]} | $(ratio "$mb" "$mc") |
| bare ipykernel: start_new_kernel until ready (in-process) | $mbr | ${BARE_READY[*]} | |

| kernel peak RSS (VmHWM, kB) | median | runs | vs bare |
|---|---:|---|---:|
| cairn scratch kernel (bootstrap + 6 cells) | $rc_ | ${RSS_CAIRN[*]} | $(pct "$rc_" "$rb") |
| bare ipykernel (jupyter_client, same 6 cells) | $rb | ${RSS_BARE[*]} | +0.0 % |
| papermill's kernel | $rp | ${RSS_PM[*]} | $(pct "$rp" "$rb") |
| nbconvert's kernel | $rn | ${RSS_NBC[*]} | $(pct "$rn" "$rb") |

| SIGKILL → died | median ms | runs (ms) |
|---|---:|---|
| cairn duration_ms of the killing cell | $km | ${KILL_MS[*]} |
| kill (cell timestamp) → cairn exited with verdict died | $ke | ${KILL_EXIT[*]} |

| target | measured | met |
|---|---|---|
| papermill / cairn on the spare ≥ 8 (issue 21) | $(ratio "$mp" "$ms") | $(ok "$mp / $ms >= 8") |
| nbconvert / cairn on the spare | $(ratio "$mn" "$ms") | |
| cairn verify < 800 ms | $mc ms | $(ok "$mc < 800") |
| papermill / cairn ≥ 2.5 | $(ratio "$mp" "$mc") | $(ok "$mp / $mc >= 2.5") |
| nbconvert / cairn ≥ 3.5 | $(ratio "$mn" "$mc") | $(ok "$mn / $mc >= 3.5") |
| kernel peak RSS within 10 % of bare | $(pct "$rc_" "$rb") | $(ok "abs($rc_ / $rb - 1) <= 0.10") |
| SIGKILL → died < 100 ms | $km ms | $(ok "$km < 100") |
EOF
