#!/usr/bin/env bash
# Targets: per-step overhead of steps on an SSH target (multiplexed) against the same workflow on
# `local`, the same workflow through Slurm, the scheduler's own latency, `target probe` cold and
# warm, and the raw ssh round trip it all rests on, with a breakdown of one remote step. All on
# loopback: the private sshd of scripts/sshd-up.sh (127.0.0.1:2222) and the single-node Slurm of
# scripts/slurm-up.sh (partition `debug`); each is started if it does not run, and stopped at the
# end only if this script started it. See BENCHMARKS.md §7 for what each figure means and the
# results on record.
#
#   scripts/bench-targets.sh                               # raw samples in bench-out/targets-<time>/
#   BENCH_REPORT=bench-out/targets-<time> scripts/bench-targets.sh   # print the tables again, measure nothing
#
# Settings (environment):
#   BENCH_STEPS=20        sequential steps of the measured chain (each a python3 tool that reads
#                         stdin and prints {})
#   BENCH_REPS=5          interleaved runs on `local` and on the SSH target (after one untimed
#                         warm-up of each); medians are reported
#   BENCH_SLURM_REPS=3    runs of the chain through Slurm (0 skips everything Slurm)
#   BENCH_SCHED_REPS=10   `sbatch --wrap true` submit → COMPLETED samples
#   BENCH_PROBE_REPS=7    `cairn target probe`, cold (control masters exited first) and warm
#   BENCH_SSH_REPS=30     samples of each raw ssh / agent measurement of the breakdown
#   BENCH_PYTHON=         the tool's interpreter (default: python3 on PATH, resolved to its real
#                         file, so that `local` and the SSH side run the very same binary; a bare
#                         `python3` would resolve through a different PATH on each side)
#   BENCH_TMP=/tmp        where the fresh CAIRN_HOME, workspace root and run directories are made
#                         (keep it short: see the note on socket paths below)
#   BENCH_OUT=bench-out/targets-<time>   where raw outputs are kept
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$(pwd)

log() { printf '==> %s\n' "$*" >&2; }
alive() { [ -s "$1" ] && kill -0 "$(cat "$1")" 2>/dev/null; }

if [ -n "${BENCH_REPORT:-}" ]; then
  BENCH_MODE=report BENCH_OUT=$BENCH_REPORT exec python3 - < <(sed -n '/^# --- the driver/,$p' "$0" | sed '1,/^python3 - <<.PY.$/d;/^PY$/,$d')
fi

OUT=${BENCH_OUT:-$ROOT/bench-out/targets-$(date +%Y%m%dT%H%M%S)}
CAIRN=$ROOT/target/release/cairn
SSHD_DIR=${SSHD_DIR:-/tmp/cairn-sshd}
SLURM_DIR=${SLURM_DIR:-/tmp/cairn-slurm}
SLURM_REPS=${BENCH_SLURM_REPS:-3}

mkdir -p "$OUT"
log "raw outputs in $OUT"
log "cargo build --release"
cargo build --release -q

# --- the services, started only if they do not run (as scripts/test.sh does) ------------------
SSHD_STARTED=no
if ! alive "$SSHD_DIR/sshd.pid"; then
  log "starting the test sshd (scripts/sshd-up.sh)"
  # The same configuration scripts/test.sh writes (its SetEnv depends on CAIRN_TEST_VENV).
  [ -x "$ROOT/.venv/bin/python" ] && export CAIRN_TEST_VENV=$ROOT/.venv
  SSHD_DIR=$SSHD_DIR scripts/sshd-up.sh >/dev/null
  SSHD_STARTED=yes
fi
SLURM_STARTED=no
if [ "$SLURM_REPS" != 0 ] && ! { alive "$SLURM_DIR/slurmctld.pid" && alive "$SLURM_DIR/slurmd.pid"; }; then
  log "starting Slurm (scripts/slurm-up.sh)"
  SLURM_DIR=$SLURM_DIR scripts/slurm-up.sh >/dev/null
  SLURM_STARTED=yes
fi

# Short paths: ssh's control sockets live in $CAIRN_HOME/ssh/ under a 53-character name, plus the
# 17 characters ssh appends while it binds, and a Unix socket path holds at most 107 bytes (a
# CAIRN_HOME over 32 bytes cannot reach an SSH target at all).
WORK=$(mktemp -d -p "${BENCH_TMP:-/tmp}" cbt.XXXXXX)
HOME_DIR=$WORK/h
cleanup() {
  CAIRN_HOME=$HOME_DIR "$CAIRN" daemon stop >/dev/null 2>&1 || true
  for s in "$HOME_DIR"/ssh/*; do   # this state root's control masters, each by its own socket
    [ -S "$s" ] && ssh -o ControlPath="$s" -O exit x >/dev/null 2>&1 || true
  done
  if command -v squeue >/dev/null && alive "$SLURM_DIR/slurmctld.pid"; then   # only our own jobs
    squeue -h -o '%i %j' 2>/dev/null | awk '$2=="bench-targets-sched"{print $1}' | xargs -r scancel 2>/dev/null || true
  fi
  rm -rf "$WORK"
  if [ "$SSHD_STARTED" = yes ] && alive "$SSHD_DIR/sshd.pid"; then kill "$(cat "$SSHD_DIR/sshd.pid")" || true; fi
  if [ "$SLURM_STARTED" = yes ]; then SLURM_DIR=$SLURM_DIR scripts/slurm-down.sh || true; fi
}
trap cleanup EXIT

PY=${BENCH_PYTHON:-$(python3 -c 'import os, sys; print(os.path.realpath(sys.executable))')}
log "tool interpreter: $PY ($("$PY" --version 2>&1))"
log "sshd: $(grep -h '^SetEnv' "$SSHD_DIR/sshd_config" 2>/dev/null || echo 'no SetEnv')"
log "load before: $(uptime)"
uptime > "$OUT/uptime-before.txt"
{ git rev-parse HEAD; git status --short -- crates; } > "$OUT/commit.txt" 2>/dev/null || true

# --- the driver (stdlib-only Python; BENCH_REPORT runs only its report) ------------------------
BENCH_MODE=measure BENCH_CAIRN=$CAIRN BENCH_WORK=$WORK BENCH_HOME=$HOME_DIR BENCH_OUT=$OUT BENCH_PY=$PY \
BENCH_ROOT=$ROOT BENCH_SSHD_DIR=$SSHD_DIR BENCH_SLURM_REPS=$SLURM_REPS \
python3 - <<'PY'
import glob, hashlib, json, os, re, shutil, statistics, subprocess, sys, time
from datetime import datetime

OUT = os.environ["BENCH_OUT"]


def log(msg):
    print(f"==> {msg}", file=sys.stderr, flush=True)


def med(xs):
    return statistics.median(xs)


def ts(s):
    """An event's `at` (RFC 3339, ms) in seconds."""
    return datetime.fromisoformat(s.replace("Z", "+00:00")).timestamp()


def metrics(raw):
    """The figures of one run from its `show`, `events` and the timed command."""
    show, events, n = raw["show"], raw["events"], len(raw["show"]["steps"])
    at = {}
    for e in events:
        at.setdefault((e["kind"], e.get("step_id")), ts(e["at"]))
    started = [at[("step.started", f"s{i}")] for i in range(n)]
    done = [at[("step.completed", f"s{i}")] for i in range(n)]
    dur = [s["duration_ms"] for s in show["steps"]]
    step = [(d - s) * 1000 for s, d in zip(started, done)]
    return {
        "cmd_ms": raw["wall_s"] * 1000,                                       # whole execute-plan command
        "run_ms": (at[("run.finished", None)] - at[("run.created", None)]) * 1000,  # as the daemon recorded it
        "steps_ms": (done[-1] - started[0]) * 1000,                           # first step start → last step end
        "step_med_ms": med(step),                                             # one step, started → completed
        "dur_med_ms": med(dur),                                               # the tool's recorded duration_ms
        "beyond_dur_med_ms": med([s - d for s, d in zip(step, dur)]),         # one step beyond its duration_ms
    }


def run_metrics(label):
    return [metrics(json.load(open(f))) for f in sorted(glob.glob(f"{OUT}/run-{label}-[0-9]*.json"))]


if os.environ["BENCH_MODE"] == "measure":
    CAIRN, WORK, HOME = (os.environ[k] for k in ("BENCH_CAIRN", "BENCH_WORK", "BENCH_HOME"))
    PY, ROOT, SSHD = os.environ["BENCH_PY"], os.environ["BENCH_ROOT"], os.environ["BENCH_SSHD_DIR"]
    N = int(os.environ.get("BENCH_STEPS", 20))
    REPS = int(os.environ.get("BENCH_REPS", 5))
    SLURM_REPS = int(os.environ["BENCH_SLURM_REPS"])
    SCHED_REPS = int(os.environ.get("BENCH_SCHED_REPS", 10))
    PROBE_REPS = int(os.environ.get("BENCH_PROBE_REPS", 7))
    SSH_REPS = int(os.environ.get("BENCH_SSH_REPS", 30))
    WF = f"bench-targets-{N}"
    SSH = "root@127.0.0.1:2222"
    WS = f"{WORK}/ws"                      # the SSH targets' workspace root (same machine: loopback)
    results = {"steps": N, "reps": REPS, "python": PY}

    def cairn(*args, check=True):
        env = dict(os.environ, CAIRN_HOME=HOME, CAIRN_QUIET_DAEMON="1")
        env.pop("XDG_STATE_HOME", None)
        r = subprocess.run([CAIRN, *args], env=env, capture_output=True, text=True)
        if check and r.returncode != 0:
            raise SystemExit(f"cairn {' '.join(args)} exited {r.returncode}:\n{r.stderr}{r.stdout[-2000:]}")
        return r

    def cairn_json(*args):
        return json.loads(cairn(*args, "--json").stdout)

    # --- the workflow: N sequential trivial python3 steps ---------------------------------------
    wf_dir = f"{WORK}/wf"
    os.makedirs(f"{wf_dir}/tools")
    with open(f"{wf_dir}/tools/noop.py", "w") as f:
        f.write("import sys\nsys.stdin.read()\nprint('{}')\n")
    with open(f"{wf_dir}/workflow.toml", "w") as f:
        f.write(f'[workflow]\nname = "{WF}"\nversion = "1.0.0"\n\n'
                f'[tools.noop]\ncommand = [{json.dumps(PY)}, "tools/noop.py"]\n\n')
        for i in range(N):
            needs = f'needs = ["s{i - 1}"]\n' if i else ""
            f.write(f'[[steps]]\nid = "s{i}"\ntool = "noop"\n{needs}args = {{}}\n\n')
    shutil.copy(f"{wf_dir}/workflow.toml", f"{OUT}/workflow.toml")
    INPUT = f"{WORK}/input.json"
    with open(INPUT, "w") as f:
        f.write("{}\n")
    os.makedirs(WS)
    os.makedirs(f"{WORK}/local")
    cairn("workflow", "add", wf_dir, "--json")
    common = ["--identity", f"{SSHD}/id_ed25519", "--known-hosts", f"{SSHD}/known_hosts", "--workspace-root", WS]
    cairn("target", "add", "lo", "--ssh", SSH, *common, "--json")
    if SLURM_REPS:
        cairn("target", "add", "lo-slurm", "--ssh", SSH, *common, "--executor", "slurm", "--partition", "debug",
              "--json")
    # An explicit daemon, so that no measured command pays its start.
    cairn("daemon", "start", "--json")

    def plan_and_execute(target, label):
        """Plans the chain on `target` (not timed), then times `cairn execute-plan`; keeps the run."""
        run_dir = f"{WORK}/local/{label}" if target == "local" else f"{WS}/{label}"
        cairn("plan", WF, "--input", INPUT, "--target", target, "--run-dir", run_dir, "--name", label, "--json")
        p = cairn_json("plan", "show", label)
        t0 = time.perf_counter()
        r = cairn("execute-plan", label, "--id", p["plan_id"], "--checksum", p["plan_checksum"], "--json", check=False)
        wall = time.perf_counter() - t0
        if r.returncode != 0:
            raise SystemExit(f"execute-plan {label} exited {r.returncode}:\n{r.stderr}{r.stdout[-3000:]}")
        run_id = json.loads(r.stdout)["run_id"]
        show = cairn_json("show", run_id)
        assert show["status"] == "READY" and len(show["steps"]) == N, (label, show["status"])
        assert all(s["status"] == "COMPLETED" and s["attempts"] == 1 for s in show["steps"]), label
        raw = {"show": show, "events": cairn_json("events", run_id)["events"], "wall_s": wall}
        json.dump(raw, open(f"{OUT}/run-{label}.json", "w"), indent=1)

    # --- 1. local against SSH, interleaved -------------------------------------------------------
    log(f"1. {N}-step chain on `local` and on `lo` (ssh, multiplexed): 1 warm-up + {REPS} interleaved runs each")
    plan_and_execute("local", "local-warm")
    plan_and_execute("lo", "ssh-warm")
    for rep in range(REPS):
        plan_and_execute("local", f"local-{rep}")
        plan_and_execute("lo", f"ssh-{rep}")

    # --- 4. the peer, and the remote side of one step --------------------------------------------
    ssh_dir = f"{HOME}/ssh"

    def masters():
        return [f"{ssh_dir}/{f}" for f in sorted(os.listdir(ssh_dir))] if os.path.isdir(ssh_dir) else []

    def exit_masters():
        for s in masters():
            subprocess.run(["ssh", "-o", f"ControlPath={s}", "-O", "exit", "x"], capture_output=True)
        for _ in range(100):
            if not masters():
                break
            time.sleep(0.01)

    def timed(argv, stdin=b""):
        t0 = time.perf_counter()
        r = subprocess.run(argv, input=stdin, capture_output=True)
        took = time.perf_counter() - t0
        assert r.returncode == 0, (argv[-1][:60], r.returncode, r.stderr[-500:])
        return took * 1000

    # Warm the master the daemon uses (a probe opens it if needed) and reuse its socket, as Cairn does.
    cairn("target", "probe", "lo", "--json")
    sock = masters()
    assert len(sock) == 1, f"expected one control master in {ssh_dir}: {sock}"
    # The client argv Cairn builds (crates/cairn-exec/src/ssh.rs, SshTransport::argv), on its socket.
    SSH_MUX = ["ssh"] + [a for o in ("BatchMode=yes", "StrictHostKeyChecking=yes", "ConnectTimeout=10",
                                      "ControlMaster=auto", f"ControlPath={sock[0]}", "ControlPersist=60",
                                      "ServerAliveInterval=5", "ServerAliveCountMax=3",
                                      f"UserKnownHostsFile={SSHD}/known_hosts", "GlobalKnownHostsFile=/dev/null",
                                      "IdentitiesOnly=yes") for a in ("-o", o)] \
        + ["-i", f"{SSHD}/id_ed25519", "-p", "2222", "-l", "root", "--", "127.0.0.1"]
    # The agent and its fixed boot line, read from the sources the binary embeds.
    agent_rs = open(f"{ROOT}/crates/cairn-exec/src/agent/mod.rs").read()
    agent_files = [[name, open(f"{ROOT}/crates/cairn-exec/src/agent/{name}").read()]
                   for name in re.findall(r'\("(agent[a-z_]*\.py)", include_str!', agent_rs)]
    boot = json.loads(re.search(r'const BOOT: &str = ("(?:[^"\\]|\\.)*");', agent_rs).group(1))
    remote_boot = f'python3 -c "{boot}"'   # the fixed remote command of every agent request
    tool_sha = hashlib.sha256(open(f"{wf_dir}/tools/noop.py", "rb").read()).hexdigest()
    adir = f"{WORK}/agent"
    os.makedirs(adir)

    def agent_line(request):
        return (json.dumps({"agent": agent_files, "request": request}) + "\n").encode()

    def run_request(i):
        """The agent's `run` of one noop step, shaped as the engine sends it (cairn-engine/src/remote.rs)."""
        return {"op": "run", "attempt_dir": f"{adir}/{i}/.cairn/attempt-1", "nonce": f"n{i}",
                "argv": [PY, f"{wf_dir}/tools/noop.py"], "cwd": f"{adir}/{i}", "run_dir": adir, "env": {},
                "allow_env": [], "stdin": "{}", "timeout": 60.0, "grace": 2.0, "stop_signal": "SIGTERM",
                "max_stdout": 1 << 20, "stderr_tail": 16 << 10, "controller": None, "slurm": None,
                "check_files": [{"path": f"{wf_dir}/tools/noop.py", "sha256": tool_sha}]}

    def agent_run(argv, i):
        """One `run` request: [whole, to the identity line, to the exit line, the tool's recorded duration], ms."""
        t0 = time.perf_counter()
        p = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
        p.stdin.write(agent_line(run_request(i)))
        p.stdin.close()
        at, end = {}, None
        for raw in p.stdout:
            if raw.startswith(b"{"):
                msg = json.loads(raw)
                at.setdefault(next(iter(msg)), time.perf_counter())
                end = msg.get("exit", end)
        p.wait()
        total = time.perf_counter() - t0
        assert p.returncode == 0 and end and end.get("exit_code") == 0, (p.returncode, end)
        return [total * 1000, (at["identity"] - t0) * 1000, (at["exit"] - t0) * 1000, end["duration_s"] * 1000]

    log(f"4. raw ssh round trip and the remote side of one step, {SSH_REPS} samples each (warm master)")
    B = {k: [] for k in ("ssh_true", "ssh_python_pass", "ssh_agent_noop", "ssh_agent_run", "local_agent_run",
                         "local_python_pass", "local_tool")}
    tail_req = agent_line({"op": "tail", "path": "/dev/null", "max_bytes": 1})
    B["agent_line_kib"] = len(tail_req) / 1024
    for i in range(SSH_REPS):
        B["ssh_true"].append(timed(SSH_MUX + ["true"]))
        B["ssh_python_pass"].append(timed(SSH_MUX + ["python3 -c pass"]))
        B["ssh_agent_noop"].append(timed(SSH_MUX + [remote_boot], tail_req))
        B["ssh_agent_run"].append(agent_run(SSH_MUX + [remote_boot], f"s{i}"))
        B["local_agent_run"].append(agent_run([PY, "-c", boot], f"l{i}"))
        B["local_python_pass"].append(timed([PY, "-c", "pass"]))
        B["local_tool"].append(timed([PY, f"{wf_dir}/tools/noop.py"], b"{}"))
    results["breakdown"] = B

    # --- 3. probe, cold and warm -----------------------------------------------------------------
    log(f"3. cairn target probe lo, cold (control masters exited) and warm, {PROBE_REPS} each")
    P = {"cold_ms": [], "warm_ms": [], "ssh_connect_ms": []}
    for _ in range(PROBE_REPS):
        exit_masters()
        for key in ("cold_ms", "warm_ms"):
            t0 = time.perf_counter()
            cairn("target", "probe", "lo", "--json")
            P[key].append((time.perf_counter() - t0) * 1000)
    # A cold ssh connection alone (handshake, auth, the master's set-up), with Cairn's options.
    for _ in range(PROBE_REPS):
        exit_masters()
        P["ssh_connect_ms"].append(timed(SSH_MUX + ["true"]))
    # What the probe's warm time is made of: the version commands it runs there (those present).
    for cmd in ("python3 -c pass", "snakemake --version", "nextflow -version", "java -version"):
        if subprocess.run(SSH_MUX + [f"command -v {cmd.split()[0]}"], capture_output=True).returncode == 0:
            P[f"ssh `{cmd}`"] = [timed(SSH_MUX + [f"{cmd} >/dev/null 2>&1"]) for _ in range(3)]
    exit_masters()
    results["probe"] = P

    # --- 2. through Slurm, and the scheduler's own latency ---------------------------------------
    if SLURM_REPS:
        log(f"2. the chain on `lo-slurm` (--executor slurm --partition debug): 1 warm-up + {SLURM_REPS} runs")
        plan_and_execute("lo-slurm", "slurm-warm")
        for rep in range(SLURM_REPS):
            plan_and_execute("lo-slurm", f"slurm-{rep}")
        log(f"2. scheduler latency: sbatch --parsable --wrap true → COMPLETED in scontrol show job -o, {SCHED_REPS} samples")
        sched = []
        for _ in range(SCHED_REPS):
            t0 = time.perf_counter()
            r = subprocess.run(["sbatch", "--parsable", "--partition", "debug", "--job-name", "bench-targets-sched",
                                "--output", "/dev/null", "--chdir", WORK, "--wrap", "true"], capture_output=True, text=True)
            t_sub = time.perf_counter()
            assert r.returncode == 0, r.stderr
            job = r.stdout.strip().split(";")[0]
            running = None
            while True:
                o = subprocess.run(["scontrol", "show", "job", "-o", job], capture_output=True, text=True).stdout
                state = re.search(r"JobState=(\S+)", o).group(1)
                now = time.perf_counter()
                if state != "PENDING" and running is None:
                    running = now
                if state == "COMPLETED":
                    break
                assert state in ("PENDING", "RUNNING", "CONFIGURING", "COMPLETING"), (job, state)
                time.sleep(0.01)
            sched.append({"total_ms": (now - t0) * 1000, "sbatch_ms": (t_sub - t0) * 1000,
                          "to_running_ms": (running - t0) * 1000})
        results["sched"] = sched
    json.dump(results, open(f"{OUT}/results.json", "w"), indent=1)

# --- report (from the raw outputs in OUT) --------------------------------------------------------
results = json.load(open(f"{OUT}/results.json"))
N, B, P = results["steps"], results["breakdown"], results["probe"]
runs = {k: run_metrics(k) for k in ("local", "ssh", "slurm")}
runs = {k: v for k, v in runs.items() if v}
S = {k: {m: med([r[m] for r in v]) for m in v[0]} for k, v in runs.items()}
L, R = S["local"], S["ssh"]
col = lambda key, i: [x[i] for x in B[key]]


def row(label, v, fmt=".1f"):
    print(f"| {label} | {med(v):{fmt}} | {min(v):{fmt}} | {max(v):{fmt}} |")


print(f"\n## {N}-step chain of a python3 noop tool, medians of {len(runs['local'])} interleaved runs (ms)\n")
print("| target | execute-plan (whole command) | run (created → finished) | run / step | steps span / step "
      "| one step, started → completed | tool duration_ms (recorded) | each run |")
print("|---|---:|---:|---:|---:|---:|---:|---|")
names = {"local": "local", "ssh": "lo (ssh, multiplexed)", "slurm": "lo-slurm (ssh + Slurm)"}
for k, s in S.items():
    print(f"| {names[k]} | {s['cmd_ms']:.0f} | {s['run_ms']:.0f} | {s['run_ms'] / N:.1f} | {s['steps_ms'] / N:.1f} "
          f"| {s['step_med_ms']:.1f} | {s['dur_med_ms']:.1f} | {[round(r['run_ms']) for r in runs[k]]} |")

over = (R["run_ms"] - L["run_ms"]) / N
each = [round((r["run_ms"] - l["run_ms"]) / N, 1) for l, r in zip(runs["local"], runs["ssh"])]
rtt = med(B["ssh_true"])
print(f"\n## Per-step overhead of the SSH target (ms)\n")
print("| measure | per step | target | met |")
print("|---|---:|---|---|")
print(f"| (ssh run − local run) / {N}, run created → finished | **{over:.1f}** (each pair: {each}) | < 30 | "
      f"{'yes' if over < 30 else 'NO'} |")
print(f"| the same, first step start → last step end (no deploy, no readiness) | {(R['steps_ms'] - L['steps_ms']) / N:.1f} | — | — |")
print(f"| the same, whole execute-plan command | {(R['cmd_ms'] - L['cmd_ms']) / N:.1f} | — | — |")
print(f"| ratio: per-step overhead ÷ raw ssh round trip ({rtt:.1f} ms) | {over / rtt:.1f}× | — | — |")

print(f"\n## The remote side of one step, measured outside Cairn: medians of {len(B['ssh_true'])} (ms, warm master)\n")
print("| measure | median | min | max |")
print("|---|---:|---:|---:|")
row("`ssh host true` (raw round trip through the master)", B["ssh_true"])
row("`ssh host python3 -c pass`", B["ssh_python_pass"])
kib = B["agent_line_kib"][0] if isinstance(B["agent_line_kib"], list) else B["agent_line_kib"]
row(f"`ssh host python3 -c BOOT`, agent op `tail` of /dev/null ({kib:.1f} KiB on stdin)", B["ssh_agent_noop"])
for where, key in (("over ssh", "ssh_agent_run"), ("locally, no ssh", "local_agent_run")):
    row(f"agent op `run` of the noop tool {where}: whole request", col(key, 0))
    row(f"… {where}: until the identity line", col(key, 1))
    row(f"… {where}: until the exit line", col(key, 2))
    row(f"… {where}: the tool's duration as the supervisor recorded it", col(key, 3))
row("`python3 -c pass` locally (the tool's interpreter)", B["local_python_pass"])
row("the noop tool alone, locally (spawn → exit)", B["local_tool"])

A = B["ssh_agent_run"]
parts = [
    ("ssh session through the warm master (`ssh host true`)", rtt),
    ("remote `python3` start (`… python3 -c pass` − `… true`)", med(B["ssh_python_pass"]) - rtt),
    ("loading the agent, preparing and launching (until the identity line − `… python3 -c pass`)",
     med(col("ssh_agent_run", 1)) - med(B["ssh_python_pass"])),
    ("the agent noticing the end (exit line − identity line − recorded duration)", med([x[2] - x[1] - x[3] for x in A])),
    ("the agent's exit after its last line, and ssh's", med([x[0] - x[2] for x in A])),
]
print(f"\n## Per-step overhead, broken down (ms, medians)\n")
print("| part | ms |")
print("|---|---:|")
for label, v in parts:
    print(f"| {label} | {v:.1f} |")
print(f"| = the remote side beyond the tool's recorded duration, outside Cairn (whole request − duration) "
      f"| {med([x[0] - x[3] for x in A]):.1f} |")
print(f"| the same inside Cairn's runs (one step, started → completed, − duration_ms) | {R['beyond_dur_med_ms']:.1f} |")
print(f"| `local`, for comparison | {L['beyond_dur_med_ms']:.1f} |")
print(f"| the tool's recorded duration, ssh − local (the supervisor's end detection) | {R['dur_med_ms'] - L['dur_med_ms']:.1f} |")
print(f"| sum of the last three ≈ per-step overhead | "
      f"{R['beyond_dur_med_ms'] - L['beyond_dur_med_ms'] + R['dur_med_ms'] - L['dur_med_ms']:.1f} (measured {over:.1f}) |")

print(f"\n## cairn target probe lo, medians of {len(P['cold_ms'])} (ms)\n")
print("| measure | median | min | max |")
print("|---|---:|---:|---:|")
row("cold (no control master)", P["cold_ms"], ".0f")
row("warm (master up)", P["warm_ms"], ".0f")
row("for reference: `ssh host true` opening a new master", P["ssh_connect_ms"], ".0f")
for key in [k for k in P if k.startswith("ssh `")]:
    row(f"what the probe runs there: {key} (warm master, {len(P[key])} samples)", P[key], ".0f")

if "sched" in results and "slurm" in S:
    sc = results["sched"]
    g = lambda k: [x[k] for x in sc]
    print(f"\n## Slurm scheduler latency, `sbatch --parsable --wrap true`, medians of {len(sc)} (ms)\n")
    print("| measure | median | min | max |")
    print("|---|---:|---:|---:|")
    row("sbatch returns", g("sbatch_ms"), ".0f")
    row("submit → first seen out of PENDING", g("to_running_ms"), ".0f")
    row("submit → COMPLETED in `scontrol show job -o`", g("total_ms"), ".0f")
    sl = S["slurm"]
    print(f"\nThrough Slurm: {sl['run_ms'] / N:.0f} ms a step (run / {N}), {sl['beyond_dur_med_ms']:.0f} ms of it beyond "
          f"the tool's duration, against {med(g('total_ms')):.0f} ms for the scheduler alone to run `true`")
PY
log "load after: $(uptime)"
uptime > "$OUT/uptime-after.txt"
