# Processes on the target, known by pid and start time (a pid alone may have been reused), their
# process groups, and the attempt files that record a launch and its end (pid.json, exit.json),
# each with the protocol that wrote it.
import json, os, select, subprocess, time

from agent_files import read_json, write_atomic
from agent_wire import PROTOCOL, READS_FILES, Foreign


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
