# The host as it is and the files Cairn puts there: readiness facts, deploying approved files, and
# reading a file's tail or a chunk of it.
import base64, hashlib, os, shutil

from agent_files import hash_file, tail
from agent_wire import emit, fail


def real_parent_ok(path):
    parent = os.path.dirname(path.rstrip("/")) or "/"
    return os.path.realpath(parent) == parent


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
        facts["inputs"][p] = hash_file(p)[1] if os.path.isfile(p) else None
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


def op_tail(r):
    text, size = tail(r["path"], r["max_bytes"])
    emit({"tail": {"text": text, "bytes": size}})


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
