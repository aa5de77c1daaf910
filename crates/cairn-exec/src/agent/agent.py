# Cairn's step agent: stdlib only, sent whole with every request (nothing is installed on the
# target). It runs on the controller host, locally or over SSH, reads one JSON line
# {"agent": <this source>, "request": {...}} from stdin, and answers with JSON lines on stdout.
#
# A step runs detached from the connection that started it: a supervisor owns the tool (in its own
# session) and records, in the attempt directory, who the tool is (pid.json, with a nonce) and how
# it ended (exit.json). A dropped connection or a dead daemon therefore loses nothing; a later
# `wait` re-attaches after checking the nonce, and never guesses.
#
# `serve` keeps one agent per target connection for a daemon's run requests (each line a request
# with an id, answered by lines with that id): no ssh session or Python start per step. There the
# agent itself supervises each tool on a thread, and finishes recording them when its connection
# ends before it leaves.
import base64, hashlib, json, os, select, shutil, signal, subprocess, sys, threading, time

BASE_ENV = ["PATH", "HOME", "USER", "LANG", "LC_ALL", "TZ", "TMPDIR"]
TERMINAL_SLURM = {"COMPLETED", "FAILED", "CANCELLED", "TIMEOUT", "NODE_FAIL", "PREEMPTED", "OUT_OF_MEMORY",
                  "BOOT_FAIL", "DEADLINE"}


OUT = threading.Lock()
CURRENT = threading.local()


class Failed(Exception):
    """An answer was emitted already; stop handling this request."""


def emit(obj):
    rid = getattr(CURRENT, "id", None)
    if rid is not None:
        obj = dict(obj, id=rid)
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


# --- readiness and deployment --------------------------------------------------------------------

def op_ready(r):
    run_dir = r["run_dir"]
    parent = os.path.dirname(run_dir.rstrip("/")) or "/"
    root = r.get("workspace_root") or ""
    facts = {
        "run_dir": run_dir,
        "parent": parent,
        "parent_is_dir": os.path.isdir(parent),
        "parent_real": os.path.realpath(parent) == parent,
        "parent_writable": os.access(parent, os.W_OK | os.X_OK),
        "run_dir_absent": not os.path.lexists(run_dir),
        "inside_workspace_root": bool(root) and (run_dir + "/").startswith(root.rstrip("/") + "/"),
        "programs": {p: shutil.which(p) for p in r.get("programs", [])},
        "inputs": {},
    }
    try:
        facts["free_bytes"] = shutil.disk_usage(parent).free if facts["parent_is_dir"] else None
    except OSError:
        facts["free_bytes"] = None
    for p in r.get("inputs", []):
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
        fd = os.open(target, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, f.get("mode", 0o644))
        with os.fdopen(fd, "wb") as out:
            out.write(data)
            out.flush()
            os.fsync(out.fileno())
    emit({"deployed": len(r["files"])})


# --- one step attempt -----------------------------------------------------------------------------

def step_env(r):
    env = {}
    for name in BASE_ENV + r.get("allow_env", []):
        if name in os.environ:
            env[name] = os.environ[name]
    env.update(r.get("env", {}))
    return env


def start_tool(r):
    """Starts the tool in its own session with the attempt's files as stdin, stdout and stderr and
    records who it is (pid.json). Returns (child, identity, began)."""
    d = r["attempt_dir"]
    with open(os.path.join(d, "stdin.json"), "rb") as sin, open(os.path.join(d, "stdout"), "wb") as sout, \
            open(os.path.join(d, "stderr"), "wb") as serr:
        child = subprocess.Popen(r["argv"], cwd=r["cwd"], env=step_env(r), stdin=sin, stdout=sout,
                                 stderr=serr, start_new_session=True)
    began = time.monotonic()
    ident = {"nonce": r["nonce"], "pid": child.pid, "pgid": child.pid, "start_time": start_time(child.pid),
             "supervisor_pid": os.getpid(), "supervisor_start_time": start_time(os.getpid()),
             "launched_at": time.time()}
    write_atomic(os.path.join(d, "pid.json"), json.dumps(ident).encode())
    return child, ident, began


def wait_tool(r, child, began):
    """Waits for the tool, enforcing its timeout on its process group (the stop signal, the grace,
    then SIGKILL), and returns how it ended."""
    result = {"exit_code": None, "signal": None, "timed_out": False, "killed_after_grace": False}
    if not wait_pid(child.pid, r["timeout"], child):
        result["timed_out"] = True
        kill_group(child.pid, getattr(signal, r.get("stop_signal", "SIGTERM")))
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


def supervise(r, report_fd):
    """The one-shot supervisor: its own session, no connection to the caller. Runs the tool and
    writes exit.json last, then tells the caller (if it still listens) that it is done."""
    d = r["attempt_dir"]
    os.setsid()
    null = os.open(os.devnull, os.O_RDWR)
    for fd in (0, 1, 2):
        os.dup2(null, fd)
    signal.signal(signal.SIGPIPE, signal.SIG_IGN)
    try:
        child, ident, began = start_tool(r)
        os.write(report_fd, (json.dumps({"identity": ident}) + "\n").encode())
        result = wait_tool(r, child, began)
    except Exception as e:  # the tool could not be started: recorded, like any other end
        result = {"exit_code": None, "signal": None, "timed_out": False, "killed_after_grace": False,
                  "error": "could not be started: %s" % e}
        try:
            os.write(report_fd, (json.dumps({"error": result["error"]}) + "\n").encode())
        except OSError:
            pass
    write_atomic(os.path.join(d, "exit.json"), json.dumps(result).encode())
    try:
        os.write(report_fd, b'{"done": true}\n')
    except OSError:
        pass


def kill_group(pgid, sig):
    try:
        os.killpg(pgid, sig)
    except (ProcessLookupError, PermissionError):
        pass


def prepare_attempt(r):
    for f in r.get("check_files", []):
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
    write_atomic(os.path.join(d, "request.json"), json.dumps(r).encode())


def launch_process(r):
    """Starts a one-shot supervisor; returns (identity, error, pipe): the pipe says `done` when
    exit.json is written (or closes if the supervisor died)."""
    rfd, wfd = os.pipe()
    pid = os.fork()
    if pid == 0:
        os.close(rfd)
        try:
            # A second fork: the supervisor is nobody's child here, so the caller may exit at once.
            if os.fork() == 0:
                supervise(r, wfd)
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


def launch_slurm(r):
    d = r["attempt_dir"]
    s = r["slurm"]
    runner = {"argv": r["argv"], "cwd": r["cwd"], "env": step_env(r), "attempt_dir": d}
    write_atomic(os.path.join(d, "runner.json"), json.dumps(runner).encode())
    # The batch script is fixed text: everything variable is in runner.json, read by Python.
    # The controller's Python when the node has it at the same path, else the node's python3.
    script = "#!/bin/sh\np=%s\n[ -x \"$p\" ] || p=python3\nexec \"$p\" -c %s\n" % (
        shell_word(sys.executable), shell_word(SLURM_RUNNER))
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
    ident = {"nonce": r["nonce"], "job_id": job_id, "launched_at": time.time()}
    write_atomic(os.path.join(d, "pid.json"), json.dumps(ident).encode())
    return ident, None


def shell_word(s):
    return "'" + s.replace("'", "'\"'\"'") + "'"


SLURM_RUNNER = r"""
import json, os, subprocess, time
r = json.load(open("runner.json"))
d = r["attempt_dir"]
res = {"exit_code": None, "signal": None, "timed_out": False, "killed_after_grace": False}
try:
    with open(os.path.join(d, "stdin.json"), "rb") as i, open(os.path.join(d, "stdout"), "wb") as o, open(os.path.join(d, "stderr"), "wb") as e:
        began = time.monotonic()
        st = subprocess.call(r["argv"], cwd=r["cwd"], env=r["env"], stdin=i, stdout=o, stderr=e)
        res["duration_s"] = time.monotonic() - began
    if st < 0:
        res["signal"] = -st
    else:
        res["exit_code"] = st
except Exception as ex:
    res["error"] = "could not be started: %s" % ex
tmp = os.path.join(d, "exit.json.tmp")
open(tmp, "w").write(json.dumps(res))
os.rename(tmp, os.path.join(d, "exit.json"))
"""


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
    exit_path = os.path.join(d, "exit.json")
    marker = os.path.join(d, "timed_out")
    # The deadline counts from the launch, not from this wait: a re-attach does not extend it.
    launched = ident.get("launched_at", time.time())
    deadline = time.monotonic() + max(0.0, launched + r["timeout"] - time.time())
    cancelled_for_time = os.path.exists(marker)
    # Slurm is asked less often as a job goes on (each check is a call to slurmctld).
    poll = 0.01
    while True:
        res = read_json(exit_path)
        if res is not None:
            break
        if "job_id" in ident:
            state, code = slurm_state(ident["job_id"])
            if state in TERMINAL_SLURM:
                # The runner may still be writing exit.json when the state turns terminal.
                time.sleep(0.2)
                res = read_json(exit_path) or {"exit_code": None, "signal": None, "timed_out": state == "TIMEOUT",
                                               "killed_after_grace": False, "slurm_state": state,
                                               "slurm_exit_code": code}
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
            res = read_json(exit_path)
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
    if size <= r["max_stdout"]:
        with open(stdout_path, "rb") as f:
            out = f.read()
    err, _ = tail(os.path.join(d, "stderr"), r["stderr_tail"])
    res["stdout_b64"] = base64.b64encode(out).decode()
    res["stdout_bytes"] = size
    res["stderr_tail"] = err
    if r.get("controller") == "snakemake":
        res["controller"] = controller_report(r)
    emit({"exit": res})


def controller_report(r):
    results = os.path.join(r["run_dir"], "results")
    files = []
    for base, dirs, names in os.walk(results):
        for n in names:
            p = os.path.join(base, n)
            files.append({"path": os.path.relpath(p, r["run_dir"]), "bytes": os.path.getsize(p)})
    files.sort(key=lambda f: f["path"])
    log, _ = tail(os.path.join(r["attempt_dir"], "stderr"), 64 << 10)
    progress = [l.strip() for l in log.splitlines() if "steps (" in l and ") done" in l]
    locks = os.path.join(r["run_dir"], ".snakemake", "locks")
    return {"kind": "snakemake", "results_dir": results, "results": files,
            "progress": progress[-1] if progress else None,
            "lock_released": not (os.path.isdir(locks) and os.listdir(locks))}


def not_started(err):
    emit({"exit": {"error": err, "exit_code": None, "signal": None, "timed_out": False,
                   "killed_after_grace": False, "stdout_b64": "", "stdout_bytes": 0, "stderr_tail": ""}})


def run_slurm(r):
    ident, err = launch_slurm(r)
    if err is not None:
        return not_started(err)
    emit({"identity": ident})
    outcome(r, ident)


def op_run(r):
    prepare_attempt(r)
    if r.get("slurm"):
        return run_slurm(r)
    ident, err, pipe = launch_process(r)
    if err is not None:
        return not_started(err)
    emit({"identity": ident})
    # The supervisor says `done` right after exit.json (or the pipe closes if it died).
    pipe.readline()
    pipe.close()
    outcome(r, ident)


def run_supervised_here(r):
    """`run` in a serving agent: this agent is the supervisor, on this thread."""
    prepare_attempt(r)
    if r.get("slurm"):
        return run_slurm(r)
    try:
        child, ident, began = start_tool(r)
    except Exception as e:  # recorded like any other end
        res = {"exit_code": None, "signal": None, "timed_out": False, "killed_after_grace": False,
               "error": "could not be started: %s" % e}
        write_atomic(os.path.join(r["attempt_dir"], "exit.json"), json.dumps(res).encode())
        return not_started(res["error"])
    emit({"identity": ident})
    res = wait_tool(r, child, began)
    write_atomic(os.path.join(r["attempt_dir"], "exit.json"), json.dumps(res).encode())
    report(r, res)


def serve_one(req):
    CURRENT.id = req.get("id")
    try:
        if req.get("op") != "run":
            fail("a serving agent takes `run` requests only, not `%s`" % req.get("op"))
        run_supervised_here(req)
    except Failed:
        pass
    except Exception as e:  # every failure is an answer
        emit({"error": "%s: %s" % (type(e).__name__, e)})


def op_serve(r):
    # The steps it supervises outlive the connection: a hangup must not stop it before their
    # ends are recorded.
    signal.signal(signal.SIGHUP, signal.SIG_IGN)
    emit({"serving": os.getpid()})
    workers = []
    for line in sys.stdin:
        try:
            req = json.loads(line)
        except ValueError:
            continue
        t = threading.Thread(target=serve_one, args=(req,))
        t.start()
        workers = [w for w in workers if w.is_alive()] + [t]
    for w in workers:
        w.join()


def recorded_identity(r):
    ident = read_json(os.path.join(r["attempt_dir"], "pid.json"))
    if ident is None and r.get("slurm") and shutil.which("squeue"):
        # The agent may have died between sbatch and writing pid.json: the job carries the nonce
        # in its name, so it is found, never submitted twice.
        out = subprocess.run(["squeue", "-h", "-t", "all", "--name", "cairn-" + r["nonce"], "-o", "%i"],
                             capture_output=True, text=True, stdin=subprocess.DEVNULL)
        ids = out.stdout.split()
        if out.returncode == 0 and len(ids) == 1:
            # job.sh is written just before sbatch: its time is the launch's, so the deadline
            # still counts from the launch.
            job_sh = os.path.join(r["attempt_dir"], "job.sh")
            launched = os.path.getmtime(job_sh) if os.path.exists(job_sh) else time.time()
            ident = {"nonce": r["nonce"], "job_id": ids[0], "launched_at": launched}
            write_atomic(os.path.join(r["attempt_dir"], "pid.json"), json.dumps(ident).encode())
    if ident is None:
        return None, "no launch was recorded in %s" % r["attempt_dir"]
    if ident.get("nonce") != r["nonce"]:
        return None, "mismatch"
    return ident, None


def op_wait(r):
    # The launch's own request holds its limits and what to report; the caller only locates it.
    launched = read_json(os.path.join(r["attempt_dir"], "request.json"))
    if launched is not None and launched.get("nonce") == r["nonce"]:
        r = launched
    ident, why = recorded_identity(r)
    if why == "mismatch":
        emit({"mismatch": "%s/pid.json holds another launch's nonce" % r["attempt_dir"]})
        return
    if ident is None:
        emit({"lost": why})
        return
    emit({"identity": ident})
    outcome(r, ident)


def op_cancel(r):
    launched = read_json(os.path.join(r["attempt_dir"], "request.json"))
    if launched is not None and launched.get("nonce") == r["nonce"]:
        r = dict(launched, grace=r.get("grace", launched["grace"]))
    ident, why = recorded_identity(r)
    if why == "mismatch":
        emit({"mismatch": "%s/pid.json holds another launch's nonce" % r["attempt_dir"]})
        return
    if ident is None:
        emit({"cancelled": False, "detail": why})
        return
    if "job_id" in ident:
        out = subprocess.run(["scancel", ident["job_id"]], capture_output=True, text=True, stdin=subprocess.DEVNULL)
        emit({"cancelled": out.returncode == 0, "detail": out.stderr.strip()})
        return
    if not alive(ident["pid"], ident["start_time"]):
        emit({"cancelled": False, "detail": "the tool had already ended"})
        return
    kill_group(ident["pgid"], getattr(signal, r.get("stop_signal", "SIGTERM")))
    end = time.monotonic() + r["grace"]
    while time.monotonic() < end and alive(ident["pid"], ident["start_time"]):
        time.sleep(0.02)
    if alive(ident["pid"], ident["start_time"]):
        kill_group(ident["pgid"], signal.SIGKILL)
    # The supervisor records the end (exit.json); give it a moment so a later wait finds it.
    end = time.monotonic() + 2
    while time.monotonic() < end and not os.path.exists(os.path.join(r["attempt_dir"], "exit.json")):
        time.sleep(0.02)
    emit({"cancelled": True, "detail": ""})


def op_tail(r):
    text, size = tail(r["path"], r["max_bytes"])
    emit({"tail": text, "bytes": size})


OPS = {"ready": op_ready, "deploy": op_deploy, "run": op_run, "serve": op_serve, "wait": op_wait, "cancel": op_cancel,
       "tail": op_tail}

try:
    OPS[REQUEST["op"]](REQUEST)
except Failed:
    pass
except Exception as e:  # every failure is an answer, never a traceback on stdout
    emit({"error": "%s: %s" % (type(e).__name__, e)})
