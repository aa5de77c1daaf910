# One step attempt, launched and supervised. A step runs detached from the connection that started
# it: a supervisor owns the tool (in its own session) and records, in the attempt directory, who the
# tool is (pid.json, with a nonce) and how it ended (exit.json), so a dropped connection or a dead
# daemon loses nothing. There is one supervisor, `supervise`: a forked process for a one-shot `run`,
# a thread of the serving agent, or the Slurm job, which runs a copy of this agent
# (`python3 agent.py supervise.json`).
#
# `serve` keeps one agent per target connection for a daemon's run requests (each line a request
# with an id, answered by lines with that id): no ssh session or Python start per step. There the
# agent itself supervises each tool on a thread, and finishes recording them when its connection
# ends before it leaves.
import json, os, shutil, signal, subprocess, sys, threading, time

from agent_files import hash_file, write_atomic
from agent_follow import outcome, report
from agent_proc import alive, exit_record, kill_group, read_record, start_time, wait_pid, write_record
from agent_wire import CURRENT, PROTOCOL, RUN, Foreign, emit, fail, handle, own_files, read_fields


def step_env(r):
    """The tool's environment, by the rule of Cairn's `sandbox_env`, from the names Cairn sent: its
    base list and the tool's list from this agent's environment when set, every variable with the
    prefix, then the request's own variables, which win."""
    env = {}
    for name in r["base_env"] + r["allow_env"]:
        if name in os.environ:
            env[name] = os.environ[name]
    for name, value in os.environ.items():
        if name.startswith(r["env_prefix"]):
            env[name] = value
    env.update(r["env"])
    return env


def start_tool(r, env):
    """Starts the tool in its own session with the attempt's files as stdin, stdout and stderr.
    Returns (child, identity, began)."""
    d = r["attempt_dir"]
    with open(os.path.join(d, "stdin.json"), "rb") as sin, open(os.path.join(d, "stdout"), "wb") as sout, \
            open(os.path.join(d, "stderr"), "wb") as serr:
        child = subprocess.Popen(r["argv"], cwd=r["cwd"], env=env, stdin=sin, stdout=sout, stderr=serr,
                                 start_new_session=True)
    began = time.monotonic()
    ident = {"protocol": PROTOCOL, "nonce": r["nonce"], "pid": child.pid, "pgid": child.pid,
             "start_time": start_time(child.pid), "supervisor_pid": os.getpid(),
             "supervisor_start_time": start_time(os.getpid()), "launched_at": time.time()}
    return child, ident, began


def wait_tool(r, child, began):
    """Waits for the tool, enforcing its timeout on its process group (the stop signal, the grace,
    then SIGKILL), and returns how it ended."""
    result = exit_record()
    if not wait_pid(child.pid, r["timeout"], child):
        result["timed_out"] = True
        kill_group(child.pid, getattr(signal, r["stop_signal"]))
        if not wait_pid(child.pid, r["grace"], child):
            result["killed_after_grace"] = True
            kill_group(child.pid, signal.SIGKILL)
            child.wait()
    status = child.returncode
    result["duration_s"] = time.monotonic() - began
    # Nothing of the tool's group outlives it.
    kill_group(child.pid, signal.SIGKILL)
    if status < 0:
        result["signal"] = -status
    else:
        result["exit_code"] = status
    return result


def redact_outputs(d, secrets):
    """Replaces every secret's value in the tool's stdout and stderr by `[secret NAME]` (longest
    value first), before exit.json says they are final: no file left on the target holds one."""
    if not secrets:
        return
    pairs = sorted(((v.encode(), ("[secret %s]" % n).encode()) for n, v in secrets.items() if v),
                   key=lambda p: -len(p[0]))
    for name in ("stdout", "stderr"):
        path = os.path.join(d, name)
        try:
            with open(path, "rb") as f:
                data = f.read()
        except OSError:
            continue
        clean = data
        for value, mark in pairs:
            clean = clean.replace(value, mark)
        if clean != data:
            write_atomic(path, clean)


def supervise(r, env, started, record_pid=True, secrets=None):
    """The one supervisor: starts the tool, records who it is in pid.json (unless a Slurm job's id
    is the launch's record) and passes the identity to `started`, waits with the timeout, and
    writes exit.json last, a could-not-start record included. Returns that record. Runs in the
    forked one-shot supervisor, on a serving agent's thread, and in the Slurm job."""
    d = r["attempt_dir"]
    try:
        child, ident, began = start_tool(r, env)
        # Test-only (Cairn's crash tests, nothing else sets it): hold the tool's pid file back
        # this many seconds, so a daemon killed meanwhile leaves a tool its successor cannot see.
        delay = os.environ.get("CAIRN_TEST_DELAY_PID_FILE")
        if delay:
            time.sleep(float(delay))
        if record_pid:
            write_record(d, "pid.json", ident)
    except Exception as e:  # the tool could not be started: recorded, like any other end
        res = exit_record(error="could not be started: %s" % e)
    else:
        started(ident)
        res = wait_tool(r, child, began)
    redact_outputs(d, secrets)
    write_record(d, "exit.json", res)
    return res


def supervise_detached(r, env, report_fd, secrets=None):
    """The one-shot supervisor: its own session, no connection to the caller. Tells the caller (if
    it still listens) who the tool is, or why it could not start, and that exit.json is written."""
    os.setsid()
    null = os.open(os.devnull, os.O_RDWR)
    for fd in (0, 1, 2):
        os.dup2(null, fd)
    signal.signal(signal.SIGPIPE, signal.SIG_IGN)

    def say(msg):
        try:
            os.write(report_fd, (json.dumps(msg) + "\n").encode())
        except OSError:
            pass

    told = []

    def started(ident):
        told.append(ident)
        say({"identity": ident})

    res = supervise(r, env, started, secrets=secrets)
    if not told:
        say({"error": res["error"]})
    say({"done": True})


def prepare_attempt(r):
    for f in r["check_files"]:
        try:
            now = hash_file(f["path"])[1]
        except OSError as e:
            fail("tool file %s cannot be read: %s" % (f["path"], e))
        if now != f["sha256"]:
            fail("tool file %s changed since it was deployed" % f["path"])
    d = r["attempt_dir"]
    os.makedirs(r["cwd"], exist_ok=True)
    try:
        os.makedirs(d)
    except FileExistsError:
        fail("attempt directory %s exists already: this attempt was launched before" % d)
    with open(os.path.join(d, "stdin.json"), "wb") as f:
        f.write(r["stdin"].encode())
    write_record(d, "request.json", r)
    if r["controller"] == "snakemake":
        release_stale_lock(r)


def release_stale_lock(r):
    """A Snakemake killed mid-pipeline leaves its lock in the working copy, and the next attempt
    resumes there: the lock is removed (what `snakemake --unlock` does) once no earlier attempt of
    the step can still be running, each checked by its recorded pid and start time. One that might
    be is left alone, and Snakemake's own lock check then refuses to run beside it."""
    locks = os.path.join(r["cwd"], ".snakemake", "locks")
    if not (os.path.isdir(locks) and os.listdir(locks)):
        return
    attempts = os.path.dirname(r["attempt_dir"])
    for name in os.listdir(attempts):
        d = os.path.join(attempts, name)
        if not name.startswith("attempt-") or d == r["attempt_dir"] or os.path.exists(os.path.join(d, "exit.json")):
            continue
        try:
            ident = read_record(d, "pid.json")
        except Foreign:
            return
        if ident is None:
            # It recorded no process: none was started, or Cairn stopped what it started by the
            # nonce in its environment before this attempt began (Cairn runs one attempt of a step
            # at a time, and stops an abandoned one's processes before the next begins).
            continue
        if "job_id" in ident or alive(ident.get("pid", 0), ident.get("start_time")) or alive(
                ident.get("supervisor_pid", 0), ident.get("supervisor_start_time")):
            return
    shutil.rmtree(locks, ignore_errors=True)


def shell_word(s):
    return "'" + s.replace("'", "'\"'\"'") + "'"


def launch_process(r, env, secrets=None):
    """Starts a one-shot supervisor; returns (identity, error, pipe): the pipe says `done` when
    exit.json is written (or closes if the supervisor died)."""
    rfd, wfd = os.pipe()
    pid = os.fork()
    if pid == 0:
        os.close(rfd)
        try:
            # A second fork: the supervisor is nobody's child here, so the caller may exit at once.
            if os.fork() == 0:
                supervise_detached(r, env, wfd, secrets)
        finally:
            os._exit(0)
    os.close(wfd)
    os.waitpid(pid, 0)
    pipe = os.fdopen(rfd)
    line = pipe.readline()
    try:
        msg = json.loads(line)
    except ValueError:
        fail("the supervisor ended before it started the tool")
    if "error" in msg:
        return None, msg["error"], pipe
    return msg["identity"], None, pipe


def launch_slurm(r, env, secrets=None):
    """Submits a job that runs this agent's own supervisor: a copy of this agent's files and its
    request (supervise.json) in the attempt directory. job.sh is fixed text, nothing variable in it
    but the controller's Python, quoted: the node's python3 when the node has no such file."""
    secrets = secrets or {}
    d = r["attempt_dir"]
    s = r["slurm"]
    for name, text in sorted(own_files().items()):
        write_atomic(os.path.join(d, name), text.encode())
    run = read_fields(r, RUN, "the run request", strict=False)
    run["secrets"] = {}
    write_record(d, "supervise.json", {"op": "supervise", "run": run, "env": env, "secret_names": sorted(secrets)})
    script = "#!/bin/sh\np=%s\n[ -x \"$p\" ] || p=python3\nexec \"$p\" -I agent.py supervise.json\n" % (
        shell_word(sys.executable))
    write_atomic(os.path.join(d, "job.sh"), script.encode())
    argv = ["sbatch", "--parsable", "--chdir", d, "--job-name", "cairn-" + r["nonce"],
            "--output", os.path.join(d, "slurm.out"), "--time", str(s["time_minutes"]),
            # The secrets' names only: their values travel in sbatch's own environment.
            "--export", ",".join(sorted(secrets)) if secrets else "NONE"]
    if s.get("partition"):
        argv += ["--partition", s["partition"]]
    if s.get("account"):
        argv += ["--account", s["account"]]
    argv.append(os.path.join(d, "job.sh"))
    if not shutil.which("sbatch"):
        return None, "sbatch is not on the target's PATH"
    out = subprocess.run(argv, capture_output=True, text=True, stdin=subprocess.DEVNULL,
                         env=dict(os.environ, **secrets) if secrets else None)
    if out.returncode != 0:
        return None, "sbatch refused the job: %s" % (out.stderr.strip() or out.stdout.strip())
    job_id = out.stdout.strip().split(";")[0]
    ident = {"protocol": PROTOCOL, "nonce": r["nonce"], "job_id": job_id, "launched_at": time.time()}
    write_record(d, "pid.json", ident)
    return ident, None


def op_supervise(r):
    """The Slurm job: the supervisor, whose launch record is the job (pid.json holds its id). Its
    secrets are in its environment, exported by name."""
    secrets = {n: os.environ[n] for n in r["secret_names"] if n in os.environ}
    env = dict(r["env"], **secrets)
    supervise(r["run"], env, lambda ident: None, record_pid=False, secrets=secrets)


def op_run(r, here=False):
    """Launches the attempt and follows it to its end: as a Slurm job; `here`, on this thread (a
    serving agent is the supervisor of its steps); else under a forked supervisor that outlives
    this agent."""
    # Kept in memory for the tool's process only: never in request.json or any other file.
    secrets = r.pop("secrets", None) or {}
    r["secrets"] = {}
    prepare_attempt(r)
    env = step_env(r)
    pipe = None
    if r["slurm"]:
        ident, err = launch_slurm(r, env, secrets)
    elif here:
        env = dict(env, **secrets)
        return report(r, supervise(r, env, lambda ident: emit({"identity": ident}), secrets=secrets))
    else:
        ident, err, pipe = launch_process(r, dict(env, **secrets), secrets)
    if err is not None:
        return report(r, exit_record(error=err))
    emit({"identity": ident})
    if pipe is not None:
        # The supervisor says `done` right after exit.json (or the pipe closes if it died).
        pipe.readline()
        pipe.close()
    outcome(r, ident)


def op_serve(r):
    # The steps it supervises outlive the connection: a hangup must not stop it before their
    # ends are recorded.
    signal.signal(signal.SIGHUP, signal.SIG_IGN)
    emit({"serving": os.getpid()})
    workers = []
    for line in sys.stdin:
        try:
            msg = json.loads(line)
        except ValueError:
            continue
        t = threading.Thread(target=serve_one, args=(msg,))
        t.start()
        workers = [w for w in workers if w.is_alive()] + [t]
    for w in workers:
        w.join()


def serve_one(msg):
    CURRENT.id = msg.get("id") if isinstance(msg, dict) else None
    handle(msg, {"run": lambda r: op_run(r, here=True)})
