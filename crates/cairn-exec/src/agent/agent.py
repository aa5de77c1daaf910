# Cairn's step agent: stdlib only, sent whole with every request (nothing is installed on the
# target). It runs on the controller host, locally or over SSH, reads one JSON line
# {"agent": <this source>, "request": {...}} from stdin, and answers with JSON lines on stdout.
# Its protocol is `agent::protocol` on Cairn's side: every request and answer carries PROTOCOL,
# and so does every file it writes in an attempt directory.
#
# A step runs detached from the connection that started it: a supervisor owns the tool (in its own
# session) and records, in the attempt directory, who the tool is (pid.json, with a nonce) and how
# it ended (exit.json). A dropped connection or a dead daemon therefore loses nothing; a later
# `wait` re-attaches after checking the nonce, and never guesses. There is one supervisor,
# `supervise`: a forked process for a one-shot `run`, a thread of the serving agent, or the Slurm
# job, which runs a copy of this file (`python3 agent.py supervise.json`).
#
# `serve` keeps one agent per target connection for a daemon's run requests (each line a request
# with an id, answered by lines with that id): no ssh session or Python start per step. There the
# agent itself supervises each tool on a thread, and finishes recording them when its connection
# ends before it leaves.
#
# Imported as a module (by Cairn's tests), it runs nothing.
import base64, hashlib, json, os, select, shutil, signal, stat, subprocess, sys, threading, time

# The protocol this agent speaks; Cairn's `protocol::PROTOCOL` is the same number.
PROTOCOL = 1
# The protocols of attempt files this agent reads. A file without `protocol` is 0: Cairn wrote
# those before versions, and protocol 1 kept every field of pid.json and exit.json and every field
# of request.json that `wait` and `cancel` read (LAUNCH), so such a launch is followed and stopped
# as before. A file of another protocol is never read as one of these: it is a mismatch.
READS_FILES = (0, 1)
TERMINAL_SLURM = {"COMPLETED", "FAILED", "CANCELLED", "TIMEOUT", "NODE_FAIL", "PREEMPTED", "OUT_OF_MEMORY",
                  "BOOT_FAIL", "DEADLINE"}


OUT = threading.Lock()
CURRENT = threading.local()


class Failed(Exception):
    """An answer was emitted already; stop handling this request."""


class Invalid(Exception):
    """A request this agent cannot read, in words."""


class Foreign(Exception):
    """An attempt file of a protocol this agent does not read: answered as a mismatch."""


class Unsupported(Exception):
    """A request of a protocol this agent does not speak: its `protocol`, as it came."""


def emit(obj):
    obj = dict(obj, protocol=PROTOCOL)
    rid = getattr(CURRENT, "id", None)
    if rid is not None:
        obj["id"] = rid
    line = json.dumps(obj, sort_keys=True) + "\n"
    with OUT:
        try:
            sys.stdout.write(line)
            sys.stdout.flush()
        except (BrokenPipeError, OSError):
            pass  # the follower went away; the step goes on and its end is recorded on disk


def fail(message):
    emit({"error": message})
    raise Failed()


def mismatch(message):
    emit({"mismatch": message})
    raise Failed()


# --- the requests ---------------------------------------------------------------------------------

class Maybe:
    """A field that may be null or left out."""

    def __init__(self, spec):
        self.spec = spec


NUMBER = (int, float)
RUN = {
    "attempt_dir": str, "nonce": str, "argv": [str], "cwd": str, "run_dir": str,
    "base_env": [str], "allow_env": [str], "env_prefix": str, "env": dict, "stdin": str,
    "timeout": NUMBER, "grace": NUMBER, "stop_signal": str, "max_stdout": int, "stderr_tail": int,
    "controller": Maybe(str),
    "slurm": Maybe({"partition": Maybe(str), "account": Maybe(str), "time_minutes": int}),
    "check_files": [{"path": str, "sha256": str}],
}
# What each op reads of its request, field by field. A request is read through this before it is
# handled, so a field Cairn renamed or added is refused by name, not read as missing.
REQUESTS = {
    "ready": {"run_dir": str, "workspace_root": str, "inputs": [str], "programs": [str]},
    "deploy": {"run_dir": str, "files": [{"path": str, "b64": str, "sha256": str, "mode": int}]},
    "run": RUN,
    "serve": {},
    "wait": {"attempt_dir": str, "nonce": str},
    "cancel": {"attempt_dir": str, "nonce": str, "grace": NUMBER},
    "tail": {"path": str, "max_bytes": int},
    "outputs": {"run_dir": str, "step_id": str, "outputs": [{"name": str, "path": str, "folder": bool}]},
    "check": {"run_dir": str, "files": [{"path": str, "sha256": str}]},
    "materialize": {"from": str, "to": str, "files": [{"path": str, "sha256": str}], "dirs": [str], "link": bool,
                    "once": Maybe(str), "write": [{"path": str, "b64": str, "sha256": str, "mode": int}]},
    "changed": {"work_dir": str, "prefix": str, "baseline": [{"path": str, "sha256": str}], "exclude": [str],
                "state": Maybe(str)},
    "read": {"path": str, "offset": int, "max_bytes": int},
    "files": {"work_dir": str, "jobs": [[str]]},
    "seed": {"snapshot": str, "to": str, "from": str, "baseline": [{"path": str, "sha256": str}],
             "files": [{"path": str, "sha256": str}], "state": Maybe({"dir": str, "sha256": str}),
             "write": [{"path": str, "b64": str, "sha256": str, "mode": int}], "once": str},
    # This agent's own: the request file of a Slurm job (Cairn never sends it).
    "supervise": {"run": RUN, "env": dict},
}
ENVELOPE = {"protocol": int, "op": str, "id": Maybe(int)}
# What `wait` and `cancel` read of a launch's request.json: the same in every protocol of READS_FILES.
LAUNCH = {k: RUN[k] for k in ("attempt_dir", "nonce", "cwd", "run_dir", "timeout", "grace", "stop_signal",
                              "max_stdout", "stderr_tail", "controller", "slurm")}


def read_fields(value, spec, where, strict=True):
    """`value` as `spec` describes it: a type (or a tuple of them), [spec] for a list, {field: spec}
    for an object (only its fields are kept; with `strict`, another one is refused), Maybe(spec).
    Raises Invalid naming the field."""
    if isinstance(spec, Maybe):
        return None if value is None else read_fields(value, spec.spec, where, strict)
    if isinstance(spec, list):
        if not isinstance(value, list):
            raise Invalid("%s is not a list" % where)
        return [read_fields(v, spec[0], "%s[%d]" % (where, i), strict) for i, v in enumerate(value)]
    if isinstance(spec, dict):
        if not isinstance(value, dict):
            raise Invalid("%s is not an object" % where)
        unknown = sorted(set(value) - set(spec))
        if strict and unknown:
            raise Invalid("%s has fields this agent does not read: %s" % (where, ", ".join(unknown)))
        out = {}
        for k, s in spec.items():
            if k in value:
                out[k] = read_fields(value[k], s, "%s.%s" % (where, k), strict)
            elif not isinstance(s, Maybe):
                raise Invalid("%s has no `%s`" % (where, k))
        return out
    types = spec if isinstance(spec, tuple) else (spec,)
    # bool is an int to isinstance; not to the protocol.
    if not isinstance(value, types) or (isinstance(value, bool) and bool not in types):
        raise Invalid("%s is not %s" % (where, " or ".join(t.__name__ for t in types)))
    return value


def parse_request(msg):
    """The request as this agent reads it: its protocol checked first, then its op and fields."""
    got = msg.get("protocol") if isinstance(msg, dict) else None
    if type(got) is not int or got != PROTOCOL:
        raise Unsupported(got)
    op = msg.get("op")
    if op not in REQUESTS:
        raise Invalid("unknown op `%s`; this agent knows %s" % (op, ", ".join(sorted(REQUESTS))))
    return read_fields(msg, dict(ENVELOPE, **REQUESTS[op]), "the `%s` request" % op)


def handle(msg, ops):
    """Answers one request: every failure is an answer, never a traceback on stdout."""
    try:
        r = parse_request(msg)
        if r["op"] not in ops:
            fail("this agent takes %s here, not `%s`" % (", ".join("`%s`" % o for o in ops), r["op"]))
        ops[r["op"]](r)
    except Failed:
        pass
    except Unsupported as e:
        got = e.args[0]
        emit({"unsupported": {
            "agent": PROTOCOL,
            "request": got if type(got) is int and got >= 0 else None,
            "error": "this step agent speaks protocol %d, but the request is %s: the agent and the Cairn that sent "
                     "it are not from one build; reinstall Cairn, so that its binary and the agent it sends agree"
                     % (PROTOCOL, "protocol %s" % got if got is not None else "without a protocol")}})
    except Invalid as e:
        emit({"error": str(e)})
    except Foreign as e:
        emit({"mismatch": str(e)})
    except Exception as e:
        emit({"error": "%s: %s" % (type(e).__name__, e)})


# --- files and processes --------------------------------------------------------------------------

def wait_pid(pid, seconds, child=None):
    """Blocks until process `pid` exits or `seconds` pass (exactly: a pidfd, not a poll loop).
    True if it exited. `child` (a Popen) is reaped afterwards when given."""
    try:
        fd = os.pidfd_open(pid)
    except (AttributeError, OSError):
        fd = None
    if fd is None:
        if child is not None:
            try:
                child.wait(timeout=max(0.0, seconds))
                return True
            except subprocess.TimeoutExpired:
                return False
        end = time.monotonic() + seconds
        while time.monotonic() < end:
            if start_time(pid) is None:
                return True
            time.sleep(0.01)
        return start_time(pid) is None
    try:
        p = select.poll()
        p.register(fd, select.POLLIN)
        done = bool(p.poll(max(0.0, seconds) * 1000))
    finally:
        os.close(fd)
    if done and child is not None:
        child.wait()
    return done


def start_time(pid):
    try:
        with open("/proc/%d/stat" % pid) as f:
            stat = f.read()
        return int(stat[stat.rindex(")") + 1:].split()[19])
    except (OSError, ValueError, IndexError):
        return None


def alive(pid, started):
    st = start_time(pid)
    if st is None or st != started:
        return False
    try:
        with open("/proc/%d/stat" % pid) as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def kill_group(pgid, sig):
    try:
        os.killpg(pgid, sig)
    except (ProcessLookupError, PermissionError):
        pass


def sha256_file(path):
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 16), b""):
            h.update(chunk)
    return h.hexdigest()


def write_atomic(path, data):
    tmp = path + ".tmp"
    with open(tmp, "wb") as f:
        f.write(data)
        f.flush()
        os.fsync(f.fileno())
    os.rename(tmp, path)


def read_json(path):
    try:
        with open(path) as f:
            return json.load(f)
    except (OSError, ValueError):
        return None


def write_record(d, name, record):
    """An attempt file, with this agent's protocol."""
    write_atomic(os.path.join(d, name), json.dumps(dict(record, protocol=PROTOCOL)).encode())


def read_record(d, name):
    """An attempt file, or None when there is none (or not yet a whole one). One of a protocol this
    agent does not read raises Foreign, naming both."""
    rec = read_json(os.path.join(d, name))
    if not isinstance(rec, dict):
        return None
    got = rec.get("protocol", 0)
    if got not in READS_FILES or type(got) is not int:
        raise Foreign("%s/%s was written by a step agent of protocol %s; this one (protocol %d) reads protocols %s "
                      "only: follow that launch with the Cairn that started it, or a newer one; nothing was touched"
                      % (d, name, got, PROTOCOL, ", ".join(map(str, READS_FILES))))
    return rec


def exit_record(**fields):
    """How an attempt ended, as exit.json holds it and `exit` answers it: nothing known but `fields`."""
    return dict({"protocol": PROTOCOL, "exit_code": None, "signal": None, "timed_out": False,
                 "killed_after_grace": False}, **fields)


def tail(path, limit):
    try:
        with open(path, "rb") as f:
            f.seek(0, 2)
            size = f.tell()
            f.seek(max(0, size - limit))
            return f.read().decode("utf-8", "replace"), size
    except OSError:
        return "", 0


def real_parent_ok(path):
    parent = os.path.dirname(path.rstrip("/")) or "/"
    return os.path.realpath(parent) == parent


def shell_word(s):
    return "'" + s.replace("'", "'\"'\"'") + "'"


# --- readiness and deployment ---------------------------------------------------------------------

def op_ready(r):
    run_dir = r["run_dir"]
    parent = os.path.dirname(run_dir.rstrip("/")) or "/"
    root = r["workspace_root"]
    facts = {
        "run_dir": run_dir,
        "parent": parent,
        "parent_is_dir": os.path.isdir(parent),
        "parent_real": os.path.realpath(parent) == parent,
        "parent_writable": os.access(parent, os.W_OK | os.X_OK),
        "run_dir_absent": not os.path.lexists(run_dir),
        "inside_workspace_root": bool(root) and (run_dir + "/").startswith(root.rstrip("/") + "/"),
        "programs": {p: shutil.which(p) for p in r["programs"]},
        "inputs": {},
    }
    try:
        facts["free_bytes"] = shutil.disk_usage(parent).free if facts["parent_is_dir"] else None
    except OSError:
        facts["free_bytes"] = None
    for p in r["inputs"]:
        facts["inputs"][p] = sha256_file(p) if os.path.isfile(p) else None
    emit({"ready": facts})


def op_deploy(r):
    run_dir = r["run_dir"]
    if not real_parent_ok(run_dir):
        fail("the parent of %s goes through a symlink or is missing" % run_dir)
    try:
        os.mkdir(run_dir)
    except OSError as e:
        fail("cannot create %s: %s" % (run_dir, e))
    for f in r["files"]:
        data = base64.b64decode(f["b64"])
        if hashlib.sha256(data).hexdigest() != f["sha256"]:
            fail("%s: its content does not match its checksum" % f["path"])
        target = os.path.join(run_dir, f["path"])
        d = run_dir
        for part in f["path"].split("/")[:-1]:
            d = os.path.join(d, part)
            if os.path.islink(d):
                fail("%s is a symlink" % d)
            if not os.path.isdir(d):
                os.mkdir(d)
        fd = os.open(target, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, f["mode"])
        with os.fdopen(fd, "wb") as out:
            out.write(data)
            out.flush()
            os.fsync(out.fileno())
    emit({"deployed": len(r["files"])})


# --- one step attempt: the supervisor -------------------------------------------------------------

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


def supervise(r, env, started, record_pid=True):
    """The one supervisor: starts the tool, records who it is in pid.json (unless a Slurm job's id
    is the launch's record) and passes the identity to `started`, waits with the timeout, and
    writes exit.json last, a could-not-start record included. Returns that record. Runs in the
    forked one-shot supervisor, on a serving agent's thread, and in the Slurm job."""
    d = r["attempt_dir"]
    try:
        child, ident, began = start_tool(r, env)
        if record_pid:
            write_record(d, "pid.json", ident)
    except Exception as e:  # the tool could not be started: recorded, like any other end
        res = exit_record(error="could not be started: %s" % e)
    else:
        started(ident)
        res = wait_tool(r, child, began)
    write_record(d, "exit.json", res)
    return res


def supervise_detached(r, env, report_fd):
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

    res = supervise(r, env, started)
    if not told:
        say({"error": res["error"]})
    say({"done": True})


def prepare_attempt(r):
    for f in r["check_files"]:
        try:
            now = sha256_file(f["path"])
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
            # It recorded no process: none was started (Cairn runs one attempt of a step at a
            # time, and stops an abandoned one's recorded process before the next begins).
            continue
        if "job_id" in ident or alive(ident.get("pid", 0), ident.get("start_time")) or alive(
                ident.get("supervisor_pid", 0), ident.get("supervisor_start_time")):
            return
    shutil.rmtree(locks, ignore_errors=True)


def launch_process(r, env):
    """Starts a one-shot supervisor; returns (identity, error, pipe): the pipe says `done` when
    exit.json is written (or closes if the supervisor died)."""
    rfd, wfd = os.pipe()
    pid = os.fork()
    if pid == 0:
        os.close(rfd)
        try:
            # A second fork: the supervisor is nobody's child here, so the caller may exit at once.
            if os.fork() == 0:
                supervise_detached(r, env, wfd)
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


def launch_slurm(r, env):
    """Submits a job that runs this agent's own supervisor: a copy of this file and its request
    (supervise.json) in the attempt directory. job.sh is fixed text, nothing variable in it but the
    controller's Python, quoted: the node's python3 when the node has no such file."""
    d = r["attempt_dir"]
    s = r["slurm"]
    write_atomic(os.path.join(d, "agent.py"), SOURCE.encode())
    run = read_fields(r, RUN, "the run request", strict=False)
    write_record(d, "supervise.json", {"op": "supervise", "run": run, "env": env})
    script = "#!/bin/sh\np=%s\n[ -x \"$p\" ] || p=python3\nexec \"$p\" -I agent.py supervise.json\n" % (
        shell_word(sys.executable))
    write_atomic(os.path.join(d, "job.sh"), script.encode())
    argv = ["sbatch", "--parsable", "--chdir", d, "--job-name", "cairn-" + r["nonce"],
            "--output", os.path.join(d, "slurm.out"), "--time", str(s["time_minutes"]), "--export", "NONE"]
    if s.get("partition"):
        argv += ["--partition", s["partition"]]
    if s.get("account"):
        argv += ["--account", s["account"]]
    argv.append(os.path.join(d, "job.sh"))
    if not shutil.which("sbatch"):
        return None, "sbatch is not on the target's PATH"
    out = subprocess.run(argv, capture_output=True, text=True, stdin=subprocess.DEVNULL)
    if out.returncode != 0:
        return None, "sbatch refused the job: %s" % (out.stderr.strip() or out.stdout.strip())
    job_id = out.stdout.strip().split(";")[0]
    ident = {"protocol": PROTOCOL, "nonce": r["nonce"], "job_id": job_id, "launched_at": time.time()}
    write_record(d, "pid.json", ident)
    return ident, None


def op_supervise(r):
    """The Slurm job: the supervisor, whose launch record is the job (pid.json holds its id)."""
    supervise(r["run"], r["env"], lambda ident: None, record_pid=False)


def slurm_state(job_id):
    out = subprocess.run(["scontrol", "show", "job", "-o", job_id], capture_output=True, text=True,
                         stdin=subprocess.DEVNULL)
    if out.returncode != 0:
        return None, out.stderr.strip()
    fields = dict(kv.split("=", 1) for kv in out.stdout.split() if "=" in kv)
    return fields.get("JobState"), fields.get("ExitCode")


def outcome(r, ident):
    """Waits for the attempt to end and answers with its record plus bounded output."""
    d = r["attempt_dir"]
    marker = os.path.join(d, "timed_out")
    # The deadline counts from the launch, not from this wait: a re-attach does not extend it.
    launched = ident.get("launched_at", time.time())
    deadline = time.monotonic() + max(0.0, launched + r["timeout"] - time.time())
    cancelled_for_time = os.path.exists(marker)
    # Slurm is asked less often as a job goes on (each check is a call to slurmctld).
    poll = 0.01
    while True:
        res = read_record(d, "exit.json")
        if res is not None:
            break
        if "job_id" in ident:
            state, code = slurm_state(ident["job_id"])
            if state in TERMINAL_SLURM:
                # The supervisor may still be writing exit.json when the state turns terminal.
                time.sleep(0.2)
                res = read_record(d, "exit.json") or exit_record(timed_out=state == "TIMEOUT",
                                                                 slurm_exit_code=code)
                if cancelled_for_time or os.path.exists(marker):
                    res["timed_out"] = True
                res["slurm_state"] = state
                break
            if not cancelled_for_time and time.monotonic() > deadline:
                # Recorded before the cancel, so whoever reads the end (maybe a successor's agent)
                # knows the job was stopped for its time.
                write_atomic(marker, b"")
                cancelled_for_time = True
                subprocess.run(["scancel", ident["job_id"]], capture_output=True, stdin=subprocess.DEVNULL)
            time.sleep(poll)
            poll = min(poll * 2, 0.25)
        elif not alive(ident["supervisor_pid"], ident["supervisor_start_time"]):
            res = read_record(d, "exit.json")
            if res is None:
                # Nobody supervises the tool any more: stop it (verified by pid and start time)
                # rather than let it run beside a new attempt.
                if alive(ident["pid"], ident["start_time"]):
                    kill_group(ident["pgid"], signal.SIGKILL)
                emit({"lost": "the step's supervisor (pid %d) ended without recording how the tool ended"
                      % ident["supervisor_pid"]})
                return
            break
        elif alive(ident["pid"], ident["start_time"]):
            wait_pid(ident["pid"], 1.0)
        else:
            # The tool has ended; its supervisor writes exit.json next.
            time.sleep(0.005)
    report(r, res)


def report(r, res):
    """Answers with an attempt's end: the record, bounded stdout, the stderr tail."""
    d = r["attempt_dir"]
    stdout_path = os.path.join(d, "stdout")
    size = os.path.getsize(stdout_path) if os.path.exists(stdout_path) else 0
    out = b""
    if 0 < size <= r["max_stdout"]:
        with open(stdout_path, "rb") as f:
            out = f.read()
    err, _ = tail(os.path.join(d, "stderr"), r["stderr_tail"])
    res = dict(res, stdout_b64=base64.b64encode(out).decode(), stdout_bytes=size, stderr_tail=err)
    if r["controller"] == "snakemake":
        res["controller"] = controller_report(r)
    emit({"exit": res})


def controller_report(r):
    """A Snakemake step's report: where it ran and whether its lock was released. Cairn reads
    its log for the jobs, and hashes its outputs."""
    locks = os.path.join(r["cwd"], ".snakemake", "locks")
    return {"kind": "snakemake", "working_copy": r["cwd"],
            "lock_released": not (os.path.isdir(locks) and os.listdir(locks))}


def op_run(r, here=False):
    """Launches the attempt and follows it to its end: as a Slurm job; `here`, on this thread (a
    serving agent is the supervisor of its steps); else under a forked supervisor that outlives
    this agent."""
    prepare_attempt(r)
    env = step_env(r)
    pipe = None
    if r["slurm"]:
        ident, err = launch_slurm(r, env)
    elif here:
        return report(r, supervise(r, env, lambda ident: emit({"identity": ident})))
    else:
        ident, err, pipe = launch_process(r, env)
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


# --- a recorded launch ----------------------------------------------------------------------------

def locate_launch(r):
    """Where `wait` and `cancel` start: the launch recorded in r's attempt directory, once it holds
    r's nonce. Returns (its request, its identity, None), or (its request or None, None, why) when no
    launch is recorded there. Another launch's records are answered as a mismatch."""
    d = r["attempt_dir"]
    launched = read_record(d, "request.json")
    if launched is None:
        return None, None, "no launch was recorded in %s" % d
    if launched.get("nonce") != r["nonce"]:
        mismatch("%s/request.json holds another launch's nonce" % d)
    # The launch's own request holds its limits and what to report; the caller only locates it.
    launch = read_fields(launched, LAUNCH, "%s/request.json" % d, strict=False)
    ident = read_record(d, "pid.json")
    if ident is None and launch["slurm"] and shutil.which("squeue"):
        # The agent may have died between sbatch and writing pid.json: the job carries the nonce
        # in its name, so it is found, never submitted twice.
        out = subprocess.run(["squeue", "-h", "-t", "all", "--name", "cairn-" + r["nonce"], "-o", "%i"],
                             capture_output=True, text=True, stdin=subprocess.DEVNULL)
        ids = out.stdout.split()
        if out.returncode == 0 and len(ids) == 1:
            # job.sh is written just before sbatch: its time is the launch's, so the deadline
            # still counts from the launch.
            job_sh = os.path.join(d, "job.sh")
            at = os.path.getmtime(job_sh) if os.path.exists(job_sh) else time.time()
            ident = {"protocol": PROTOCOL, "nonce": r["nonce"], "job_id": ids[0], "launched_at": at}
            write_record(d, "pid.json", ident)
    if ident is None:
        return launch, None, "no launch was recorded in %s" % d
    if ident.get("nonce") != r["nonce"]:
        mismatch("%s/pid.json holds another launch's nonce" % d)
    return launch, ident, None


def op_wait(r):
    launch, ident, why = locate_launch(r)
    if ident is None:
        emit({"lost": why})
        return
    emit({"identity": ident})
    outcome(launch, ident)


def op_cancel(r):
    launch, ident, why = locate_launch(r)
    if ident is None:
        emit({"cancelled": {"stopped": False, "detail": why}})
        return
    d = launch["attempt_dir"]
    if "job_id" in ident:
        out = subprocess.run(["scancel", ident["job_id"]], capture_output=True, text=True, stdin=subprocess.DEVNULL)
        emit({"cancelled": {"stopped": out.returncode == 0, "detail": out.stderr.strip()}})
        return
    if not alive(ident["pid"], ident["start_time"]):
        emit({"cancelled": {"stopped": False, "detail": "the tool had already ended"}})
        return
    kill_group(ident["pgid"], getattr(signal, launch["stop_signal"]))
    end = time.monotonic() + r["grace"]
    while time.monotonic() < end and alive(ident["pid"], ident["start_time"]):
        time.sleep(0.02)
    if alive(ident["pid"], ident["start_time"]):
        kill_group(ident["pgid"], signal.SIGKILL)
    # The supervisor records the end (exit.json); give it a moment so a later wait finds it.
    end = time.monotonic() + 2
    while time.monotonic() < end and not os.path.exists(os.path.join(d, "exit.json")):
        time.sleep(0.02)
    emit({"cancelled": {"stopped": True, "detail": ""}})


def op_tail(r):
    text, size = tail(r["path"], r["max_bytes"])
    emit({"tail": {"text": text, "bytes": size}})


# --- artifacts: the rules and words of `cairn_exec::artifacts`, on the target ----------------------

class Fault(Exception):
    """A declared output that cannot be recorded: the step's error, in words."""


def hash_file(path):
    h, size = hashlib.sha256(), 0
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            size += len(chunk)
            h.update(chunk)
    return size, h.hexdigest()


def kind_of(st):
    import stat
    if stat.S_ISLNK(st.st_mode):
        return "a symlink"
    if stat.S_ISDIR(st.st_mode):
        return "a folder"
    if stat.S_ISREG(st.st_mode):
        return "a file"
    return "not a regular file (a device, socket or pipe)"


def symlinked_component(root, rel):
    at = root
    for part in rel.split("/"):
        at = os.path.join(at, part)
        try:
            if os.path.islink(at):
                return at
            os.lstat(at)
        except OSError:
            return None
    return None


def safe_relative(rel):
    return bool(rel) and not rel.startswith("/") and all(p not in ("", ".", "..") for p in rel.split("/"))


def hash_outputs(run_dir, step_id, outputs):
    import stat
    out = []
    for d in outputs:
        name, declared = d["name"], d["path"] + ("/" if d["folder"] else "")
        rel = "steps/%s/%s" % (step_id, d["path"])
        path = os.path.join(run_dir, rel)

        def not_a_file(at, found):
            return Fault("declared output %s (%s) is %s at %s: Cairn records only regular files, and a symlink is "
                         "never followed; write the file itself there" % (name, declared, found, at))

        def unreadable(at, e):
            return Fault("declared output %s (%s): %s cannot be read: %s" % (name, declared, at, e))

        def one(at, rel_at):
            try:
                size, sha = hash_file(at)
            except OSError as e:
                raise unreadable(at, e)
            return {"name": name, "path": rel_at, "bytes": size, "sha256": sha}

        link = symlinked_component(run_dir, rel)
        if link is not None:
            raise not_a_file(link, "a symlink")
        try:
            st = os.lstat(path)
        except FileNotFoundError:
            raise Fault("declared output %s (%s) was not written" % (name, declared))
        except OSError as e:
            raise unreadable(path, e)
        is_dir, is_file = stat.S_ISDIR(st.st_mode), stat.S_ISREG(st.st_mode)
        if not d["folder"] and is_dir:
            raise Fault("declared output %s (%s) is a folder; declare it as `%s/` or write a file there"
                        % (name, declared, declared))
        if d["folder"] and is_file:
            raise Fault("declared output %s (%s) is a file; declare it without the trailing `/` or write a folder "
                        "there" % (name, declared))
        if is_file:
            out.append(one(path, rel))
        elif is_dir:
            files = []
            stack = [(path, rel)]
            while stack:
                at, rel_at = stack.pop()
                try:
                    entries = os.listdir(at)
                except OSError as e:
                    raise unreadable(at, e)
                for entry in entries:
                    child, rel_child = os.path.join(at, entry), rel_at + "/" + entry
                    cst = os.lstat(child)
                    if stat.S_ISDIR(cst.st_mode):
                        stack.append((child, rel_child))
                    elif stat.S_ISREG(cst.st_mode):
                        files.append((rel_child, child))
                    else:
                        raise not_a_file(child, kind_of(cst))
            # Byte order of the UTF-8 paths, as Rust sorts its strings.
            for rel_child, child in sorted(files, key=lambda f: f[0].encode()):
                out.append(one(child, rel_child))
        else:
            raise not_a_file(path, kind_of(st))
    return out


def link_digest(target):
    """As cairn_core::artifact::link_digest: what a symlink artifact is recorded and checked as."""
    return hashlib.sha256(b"symlink\0" + os.fsencode(target)).hexdigest()


def check_artifact(run_dir, rel, sha256):
    """None when the recorded bytes (or, for a recorded symlink, its target) are there; else what
    is found."""
    if not safe_relative(rel):
        return {"kind": "missing"}
    link = symlinked_component(run_dir, rel)
    if link is not None and link == os.path.join(run_dir, rel):
        try:
            found = link_digest(os.readlink(link))
        except OSError:
            return {"kind": "missing"}
        return None if found == sha256 else {"kind": "changed", "sha256": found}
    if link is not None:
        return {"kind": "missing"}
    path = os.path.join(run_dir, rel)
    if not os.path.isfile(path) or os.path.islink(path):
        return {"kind": "missing"}
    try:
        _, found = hash_file(path)
    except OSError:
        return {"kind": "missing"}
    return None if found == sha256 else {"kind": "changed", "sha256": found}


def op_outputs(r):
    try:
        emit({"outputs": {"artifacts": hash_outputs(r["run_dir"], r["step_id"], r["outputs"]), "fault": None}})
    except Fault as e:
        emit({"outputs": {"artifacts": [], "fault": str(e)}})


def op_check(r):
    emit({"checked": {f["path"]: check_artifact(r["run_dir"], f["path"], f["sha256"]) for f in r["files"]}})


def write_given(to, writes, checked, done):
    """Files given whole (a run's configuration): written where absent, checked where present."""
    for w in writes:
        dest = checked(w["path"])
        data = base64.b64decode(w["b64"])
        if hashlib.sha256(data).hexdigest() != w["sha256"]:
            fail("%s cannot be written: its content is not its checksum" % w["path"])
        found = check_artifact(to, w["path"], w["sha256"])
        if found is None:
            done["present"] += 1
        elif found["kind"] == "missing" and not os.path.lexists(dest):
            os.makedirs(os.path.dirname(dest), exist_ok=True)
            # Whole or not at all: written beside it, then linked in (never replacing a file), so a
            # kill midway leaves no half file to conflict with.
            tmp = os.path.join(os.path.dirname(dest), "." + os.path.basename(dest) + ".partial")
            fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW, w["mode"])
            try:
                with os.fdopen(fd, "wb") as out:
                    out.write(data)
                    out.flush()
                    os.fsync(out.fileno())
                os.link(tmp, dest)
            finally:
                os.unlink(tmp)
            done["copied"] += 1
        else:
            what = "sha256 %s" % found["sha256"] if found["kind"] == "changed" else "missing"
            fail("%s cannot be written: it is there with other content (%s), not the approved one" % (w["path"], what))


def op_materialize(r):
    src_root, to = r["from"], r["to"]
    done = {"linked": 0, "copied": 0, "present": 0}

    def checked(rel):
        if not safe_relative(rel) or symlinked_component(to, rel) is not None:
            fail("recorded artifact path `%s` is not inside its run directory" % rel)
        return os.path.join(to, rel)

    for d in r["dirs"]:
        os.makedirs(checked(d), exist_ok=True)
    write_given(to, r["write"], checked, done)
    if r["once"] is not None and os.path.isfile(checked(r["once"])):
        done["present"] += len(r["files"])
        emit({"materialized": done})
        return
    for f in r["files"]:
        rel, sha = f["path"], f["sha256"]
        dest = checked(rel)
        if check_artifact(to, rel, sha) is None:
            done["present"] += 1
            continue
        src = os.path.join(src_root, rel)
        if symlinked_component(src_root, rel) == src and check_artifact(src_root, rel, sha) is None:
            # A recorded symlink: made again with its target's text, never followed.
            os.makedirs(os.path.dirname(dest), exist_ok=True)
            place_link(os.readlink(src), dest)
            done["copied"] += 1
            continue
        problem = None
        if symlinked_component(src_root, rel) is not None:
            problem = "a symlink"
        elif not os.path.lexists(src):
            problem = "missing"
        elif not os.path.isfile(src):
            problem = "not a regular file"
        if problem:
            fail("artifact %s of run directory %s is not the recorded bytes (%s); plan the replay again, and the step "
                 "is re-executed" % (rel, src_root, problem))
        try:
            os.makedirs(os.path.dirname(dest), exist_ok=True)
            tmp = os.path.join(os.path.dirname(dest), ".%s.cairn-materialize" % os.path.basename(dest))
            if os.path.lexists(tmp):
                os.unlink(tmp)
            linked = False
            if r["link"]:
                try:
                    os.link(src, tmp)
                    linked = True
                except OSError:
                    pass
            if not linked:
                shutil.copy2(src, tmp)
            _, got = hash_file(tmp)
        except OSError as e:
            fail("artifact %s cannot be materialised into %s: %s" % (rel, to, e))
        if got != sha:
            os.unlink(tmp)
            fail("artifact %s of run directory %s is not the recorded bytes (sha256 %s); plan the replay again, and "
                 "the step is re-executed" % (rel, src_root, got))
        os.rename(tmp, dest)
        done["linked" if linked else "copied"] += 1
    if r["once"] is not None:
        marker = checked(r["once"])
        os.makedirs(os.path.dirname(marker), exist_ok=True)
        write_atomic(marker, "".join("%s  %s\n" % (f["sha256"], f["path"]) for f in r["files"]).encode())
    emit({"materialized": done})


def state_digest(d):
    """As artifacts.rs's state_digest: SHA-256 over the folder's files' names and SHA-256s."""
    try:
        names = os.listdir(d)
    except FileNotFoundError:
        return None
    files = sorted(n for n in names if os.path.isfile(os.path.join(d, n)) and not os.path.islink(os.path.join(d, n)))
    listing = "".join("%s  %s\n" % (hash_file(os.path.join(d, n))[1], n) for n in files)
    return hashlib.sha256(listing.encode()).hexdigest()


def place_link(target, dest):
    """As artifacts.rs's place_link: the symlink made beside dest and renamed into place."""
    tmp = os.path.join(os.path.dirname(dest), ".%s.cairn-link" % os.path.basename(dest))
    if os.path.lexists(tmp):
        os.unlink(tmp)
    os.symlink(target, tmp)
    os.rename(tmp, dest)


def copy_keeping(src, dest, sha, keep_time):
    """As artifacts.rs's copy_checked: through a file beside dest, checked, its time kept. Returns
    None, or the SHA-256 found when the copy is not the expected bytes."""
    st = os.lstat(src)
    if stat.S_ISLNK(st.st_mode):
        target = os.readlink(src)
        if sha is not None and link_digest(target) != sha:
            return link_digest(target)
        os.makedirs(os.path.dirname(dest), exist_ok=True)
        place_link(target, dest)
        if keep_time:
            os.utime(dest, ns=(st.st_atime_ns, st.st_mtime_ns), follow_symlinks=False)
        return None
    if sha is not None and os.path.isfile(dest) and not os.path.islink(dest) and hash_file(dest)[1] == sha:
        return None
    os.makedirs(os.path.dirname(dest), exist_ok=True)
    if not stat.S_ISREG(st.st_mode):
        raise OSError("%s is not a regular file" % src)
    tmp = os.path.join(os.path.dirname(dest), ".%s.cairn-seed" % os.path.basename(dest))
    if os.path.lexists(tmp):
        os.unlink(tmp)
    with open(src, "rb") as fin, open(tmp, "wb") as fout:
        # A reflink where the filesystem offers one, else an in-kernel copy; never a link.
        try:
            while os.copy_file_range(fin.fileno(), fout.fileno(), 1 << 30):
                pass
        except (AttributeError, OSError):
            fin.seek(0)
            fout.seek(0)
            fout.truncate()
            shutil.copyfileobj(fin, fout, 1 << 20)
    os.chmod(tmp, stat.S_IMODE(st.st_mode))
    if sha is not None:
        got = hash_file(tmp)[1]
        if got != sha:
            os.unlink(tmp)
            return got
    if keep_time:
        os.utime(tmp, ns=(st.st_atime_ns, st.st_mtime_ns))
    os.rename(tmp, dest)
    return None


def op_seed(r):
    """As artifacts.rs's seed_working_copy: a pipeline's working copy made from its snapshot and
    seeded from an earlier run's copy of the step."""
    snapshot, to, earlier = r["snapshot"], r["to"], r["from"]
    done = {"carried": 0, "left_out": [], "state": False, "present": False}

    def checked(rel):
        if not safe_relative(rel) or symlinked_component(to, rel) is not None:
            fail("recorded artifact path `%s` is not inside its run directory" % rel)
        return os.path.join(to, rel)

    marker = checked(r["once"])
    if os.path.isfile(marker):
        done["present"] = True
        emit({"seeded": done})
        return
    state_files = []
    state = r.get("state")
    if state and safe_relative(state["dir"]) and symlinked_component(earlier, state["dir"]) is None:
        d = os.path.join(earlier, state["dir"])
        if state_digest(d) == state["sha256"]:
            state_files = sorted("%s/%s" % (state["dir"], n) for n in os.listdir(d)
                                 if os.path.isfile(os.path.join(d, n)) and not os.path.islink(os.path.join(d, n)))
            done["state"] = True
    try:
        copied = set()
        for f in r["baseline"]:
            rel, sha = f["path"], f["sha256"]
            from_earlier = done["state"] and check_artifact(earlier, rel, sha) is None
            got = copy_keeping(os.path.join(earlier if from_earlier else snapshot, rel), checked(rel), sha, from_earlier)
            if got is not None:
                fail("artifact %s of run directory %s is not the recorded bytes (sha256 %s); plan the replay again, "
                     "and the step is re-executed" % (rel, snapshot, got))
            if from_earlier:
                done["carried"] += 1
            copied.add(rel)
        for f in r["files"]:
            rel, sha = f["path"], f["sha256"]
            if rel in copied:
                continue
            if not done["state"]:
                done["left_out"].append([rel, "the pipeline's record of its jobs changed or is missing"])
                continue
            found = check_artifact(earlier, rel, sha)
            if found is not None:
                why = ("its bytes changed (sha256 %s)" % found["sha256"][:12] if found["kind"] == "changed"
                       else "missing, or reached through a symlink")
                done["left_out"].append([rel, why])
                continue
            got = copy_keeping(os.path.join(earlier, rel), checked(rel), sha, True)
            if got is None:
                done["carried"] += 1
            else:
                done["left_out"].append([rel, "its bytes changed (sha256 %s)" % got[:12]])
        for rel in state_files:
            copy_keeping(os.path.join(earlier, rel), checked(rel), None, True)
            done["carried"] += 1
    except OSError as e:
        fail("the working copy cannot be seeded into %s: %s" % (to, e))
    write_given(to, r["write"], checked, {"present": 0, "copied": 0})
    os.makedirs(os.path.dirname(marker), exist_ok=True)
    listing = ["#seeded " + json.dumps(done, separators=(",", ":"))]
    listing += ["%s  %s" % (f["sha256"], f["path"]) for f in r["baseline"]]
    write_atomic(marker, ("\n".join(listing) + "\n").encode())
    emit({"seeded": done})


def changed_files(work_dir, prefix, baseline, exclude):
    """The files under work_dir that are not the baseline: created or changed there."""
    import stat
    known = {b["path"]: b["sha256"] for b in baseline}
    files = []
    stack = [(work_dir, "")]
    while stack:
        d, rel = stack.pop()
        for entry in os.listdir(d):
            if not rel and entry in exclude:
                continue
            path, child = os.path.join(d, entry), (rel + "/" + entry if rel else entry)
            st = os.lstat(path)
            if stat.S_ISDIR(st.st_mode):
                stack.append((path, child))
            elif stat.S_ISREG(st.st_mode) or stat.S_ISLNK(st.st_mode):
                files.append((child, path))
            else:
                raise Fault("declared output pipeline (its working copy) is %s at %s: Cairn records only regular files, "
                            "and a symlink is never followed; write the file itself there" % (kind_of(st), path))
    out = []
    for name, path in sorted(files, key=lambda f: f[0].encode()):
        if os.path.islink(path):
            # Recorded as what it is, its target's text; never followed.
            target = os.readlink(path)
            out.append({"name": name, "path": "%s/%s" % (prefix, name), "bytes": len(os.fsencode(target)),
                        "sha256": link_digest(target), "link": target})
            continue
        size, sha = hash_file(path)
        if known.get(name) == sha:
            continue
        out.append({"name": name, "path": "%s/%s" % (prefix, name), "bytes": size, "sha256": sha})
    return out


def op_read(r):
    try:
        with open(r["path"], "rb") as f:
            f.seek(0, 2)
            size = f.tell()
            f.seek(min(r["offset"], size))
            data = f.read(r["max_bytes"])
    except FileNotFoundError:
        size, data = 0, b""
    except OSError as e:
        fail("%s cannot be read: %s" % (r["path"], e))
    emit({"chunk": {"b64": base64.b64encode(data).decode(), "offset": min(r["offset"], size), "size": size}})


def op_changed(r):
    try:
        artifacts = changed_files(r["work_dir"], r["prefix"], r["baseline"], r["exclude"])
        state = state_digest(os.path.join(r["work_dir"], r["state"])) if r.get("state") else None
        emit({"outputs": {"artifacts": artifacts, "fault": None, "state_sha256": state}})
    except Fault as e:
        emit({"outputs": {"artifacts": [], "fault": str(e)}})


def job_files(work_dir, paths):
    """What a finished pipeline job's outputs hold: as artifacts.rs's job_files says."""
    def bare(p):
        return {"path": p}

    def entry(at, rel):
        try:
            size, sha = hash_file(at)
            return {"path": rel, "bytes": size, "sha256": sha}
        except OSError:
            return bare(rel)

    def walk(d, rel, out):
        try:
            names = os.listdir(d)
        except OSError:
            return
        for name in names:
            child, path = rel + "/" + name, os.path.join(d, name)
            if os.path.islink(path):
                out.append({"path": child, "link": os.readlink(path)})
            elif os.path.isdir(path):
                walk(path, child, out)
            elif os.path.isfile(path):
                out.append(entry(path, child))

    out = []
    for rel in paths:
        rel = rel.rstrip("/")
        if not safe_relative(rel):
            out.append(bare(rel))
            continue
        at = os.path.join(work_dir, rel)
        link = symlinked_component(work_dir, rel)
        if link is not None:
            out.append({"path": rel, "link": os.readlink(at)} if link == at else bare(rel))
        elif os.path.isdir(at):
            found = []
            walk(at, rel, found)
            out.extend(sorted(found, key=lambda f: f["path"]))
        elif os.path.isfile(at):
            out.append(entry(at, rel))
        else:
            out.append(bare(rel))
    return out


def op_files(r):
    emit({"files": [job_files(r["work_dir"], paths) for paths in r["jobs"]]})


OPS = {"ready": op_ready, "deploy": op_deploy, "run": op_run, "serve": op_serve, "wait": op_wait,
       "cancel": op_cancel, "tail": op_tail, "outputs": op_outputs, "check": op_check, "materialize": op_materialize,
       "changed": op_changed, "read": op_read, "files": op_files, "seed": op_seed}


def main(msg):
    handle(msg, OPS)


if __name__ == "cairn_agent":  # sent by Cairn: BOOT gives the request
    main(REQUEST)
elif __name__ == "__main__":  # a Slurm job: `python3 agent.py supervise.json` in its attempt directory
    handle(read_json(sys.argv[1]), {"supervise": op_supervise})
