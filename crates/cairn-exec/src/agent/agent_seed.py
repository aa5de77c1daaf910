# A pipeline's working copy made from its snapshot and seeded from an earlier run's copy of the
# step, as artifacts.rs's seed_working_copy does here.
import json, os, shutil, stat

from agent_artifacts import write_given
from agent_files import (check_artifact, hash_file, inside, link_digest, place_link, plain_files, safe_relative,
                         state_digest, symlinked_component, write_atomic)
from agent_wire import emit, fail


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

    marker = inside(to, r["once"])
    if os.path.isfile(marker):
        done["present"] = True
        emit({"seeded": done})
        return
    state_files = []
    state = r.get("state")
    if state and safe_relative(state["dir"]) and symlinked_component(earlier, state["dir"]) is None:
        d = os.path.join(earlier, state["dir"])
        if state_digest(d) == state["sha256"]:
            state_files = ["%s/%s" % (state["dir"], n) for n in plain_files(d)]
            done["state"] = True
    try:
        copied = set()
        for f in r["baseline"]:
            rel, sha = f["path"], f["sha256"]
            from_earlier = done["state"] and check_artifact(earlier, rel, sha) is None
            got = copy_keeping(os.path.join(earlier if from_earlier else snapshot, rel), inside(to, rel), sha, from_earlier)
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
            got = copy_keeping(os.path.join(earlier, rel), inside(to, rel), sha, True)
            if got is None:
                done["carried"] += 1
            else:
                done["left_out"].append([rel, "its bytes changed (sha256 %s)" % got[:12]])
        for rel in state_files:
            copy_keeping(os.path.join(earlier, rel), inside(to, rel), None, True)
            done["carried"] += 1
    except OSError as e:
        fail("the working copy cannot be seeded into %s: %s" % (to, e))
    write_given(to, r["write"], {"present": 0, "copied": 0})
    os.makedirs(os.path.dirname(marker), exist_ok=True)
    listing = ["#seeded " + json.dumps(done, separators=(",", ":"))]
    listing += ["%s  %s" % (f["sha256"], f["path"]) for f in r["baseline"]]
    write_atomic(marker, ("\n".join(listing) + "\n").encode())
    emit({"seeded": done})
