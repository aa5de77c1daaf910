# A launch followed to its end, and a recorded launch found again (`wait`) or stopped (`cancel`)
# once its nonce matched: a later `wait` re-attaches after checking the nonce, and never guesses.
import base64, os, shutil, signal, subprocess, time

from agent_files import disk_space, tail, write_atomic
from agent_proc import alive, exit_record, kill_group, read_record, wait_pid, write_record
from agent_wire import LAUNCH, PROTOCOL, emit, mismatch, read_fields


TERMINAL_SLURM = {"COMPLETED", "FAILED", "CANCELLED", "TIMEOUT", "NODE_FAIL", "PREEMPTED", "OUT_OF_MEMORY",
                  "BOOT_FAIL", "DEADLINE"}


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
    if res.get("exit_code") != 0:
        # Read now, for a tool that did not succeed: Cairn names a full disk as its cause.
        res["disks"] = disk_space([r["cwd"]])
    if r["controller"] == "snakemake":
        res["controller"] = controller_report(r)
    emit({"exit": res})


def controller_report(r):
    """A Snakemake step's report: where it ran and whether its lock was released. Cairn reads
    its log for the jobs, and hashes its outputs."""
    locks = os.path.join(r["cwd"], ".snakemake", "locks")
    return {"kind": "snakemake", "working_copy": r["cwd"],
            "lock_released": not (os.path.isdir(locks) and os.listdir(locks))}


# How long `wait` and `cancel` wait for the pid file of a launch whose request was just recorded:
# its supervisor writes it the moment the tool has started, and a request that came in between
# must not call a starting launch lost (its step would start again beside it).
PID_FILE_GRACE_S = 10.0
# A request older than this whose pid file is missing is not starting: its supervisor is gone.
STARTING_FOR_S = 120.0


def await_pid_file(d):
    """The pid file of a launch still starting in d, once written; None when there is none to wait
    for (the launch ended, or is not recent), or after the grace."""
    request = os.path.join(d, "request.json")
    deadline = time.time() + PID_FILE_GRACE_S
    while time.time() < deadline:
        try:
            recent = time.time() - os.path.getmtime(request) < STARTING_FOR_S
        except OSError:
            return None
        if not recent or read_record(d, "exit.json") is not None:
            return read_record(d, "pid.json")
        time.sleep(0.05)
        ident = read_record(d, "pid.json")
        if ident is not None:
            return ident
    return None


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
    if ident is None and not launch["slurm"]:
        ident = await_pid_file(d)
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
