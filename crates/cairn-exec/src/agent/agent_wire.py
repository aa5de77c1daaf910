# The step agent's protocol, as it frames it: what each request holds (REQUESTS, through which a
# request is read field by field before it is handled), the answers as JSON lines on stdout, each
# with PROTOCOL (and a serving agent's request id), and every failure an answer, never a
# traceback. Cairn's side is `agent::protocol`: every request and answer carries PROTOCOL, and so
# does every file the agent writes in an attempt directory.
import json, os, sys, threading


# The protocol this agent speaks; Cairn's `protocol::PROTOCOL` is the same number.
PROTOCOL = 1


# The protocols of attempt files this agent reads. A file without `protocol` is 0: Cairn wrote
# those before versions, and protocol 1 kept every field of pid.json and exit.json and every field
# of request.json that `wait` and `cancel` read (LAUNCH), so such a launch is followed and stopped
# as before. A file of another protocol is never read as one of these: it is a mismatch.
READS_FILES = (0, 1)


# This agent's files: Cairn sends them all with every request (`agent::AGENT_FILES`, the same
# names), and a Slurm job gets a copy of them all.
FILES = ("agent.py", "agent_wire.py", "agent_files.py", "agent_proc.py", "agent_launch.py", "agent_follow.py",
         "agent_host.py", "agent_artifacts.py", "agent_seed.py")

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
    "secrets": dict,
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
    "supervise": {"run": RUN, "env": dict, "secret_names": [str]},
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


def own_files():
    """This agent's files by name, to copy for a Slurm job: as Cairn sent them (agent.py's loader
    holds them), or else read from beside this file."""
    sent = getattr(globals().get("__loader__"), "sources", None)
    if sent is not None:
        return dict(sent)
    here = os.path.dirname(os.path.abspath(__file__))
    files = {}
    for name in FILES:
        with open(os.path.join(here, name)) as f:
            files[name] = f.read()
    return files
