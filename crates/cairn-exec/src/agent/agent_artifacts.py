# Artifacts on the target, as `cairn_exec::artifacts` handles them here, with the same rules and
# words: a completed attempt's declared outputs hashed, recorded artifacts checked, a source run's
# artifacts materialised, a working copy's changed files and a pipeline job's files read.
import base64, hashlib, os, shutil, stat

from agent_files import (check_artifact, hash_file, inside, kind_of, link_digest, place_link, safe_relative,
                         state_digest, symlinked_component, walk, write_atomic)
from agent_wire import emit, fail


class Fault(Exception):
    """A declared output that cannot be recorded: the step's error, in words."""


def hash_outputs(run_dir, step_id, outputs):
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
            for rel_child, child, cst in walk(path, rel, unlistable=unreadable):
                if not stat.S_ISREG(cst.st_mode):
                    raise not_a_file(child, kind_of(cst))
                files.append((rel_child, child))
            # Byte order of the UTF-8 paths, as Rust sorts its strings.
            for rel_child, child in sorted(files, key=lambda f: f[0].encode()):
                out.append(one(child, rel_child))
        else:
            raise not_a_file(path, kind_of(st))
    return out


def op_outputs(r):
    try:
        emit({"outputs": {"artifacts": hash_outputs(r["run_dir"], r["step_id"], r["outputs"]), "fault": None}})
    except Fault as e:
        emit({"outputs": {"artifacts": [], "fault": str(e)}})


def op_check(r):
    emit({"checked": {f["path"]: check_artifact(r["run_dir"], f["path"], f["sha256"]) for f in r["files"]}})


def write_given(to, writes, done):
    """Files given whole (a run's configuration): written where absent, checked where present."""
    for w in writes:
        dest = inside(to, w["path"])
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

    for d in r["dirs"]:
        os.makedirs(inside(to, d), exist_ok=True)
    write_given(to, r["write"], done)
    if r["once"] is not None and os.path.isfile(inside(to, r["once"])):
        done["present"] += len(r["files"])
        emit({"materialized": done})
        return
    for f in r["files"]:
        rel, sha = f["path"], f["sha256"]
        dest = inside(to, rel)
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
        marker = inside(to, r["once"])
        os.makedirs(os.path.dirname(marker), exist_ok=True)
        write_atomic(marker, "".join("%s  %s\n" % (f["sha256"], f["path"]) for f in r["files"]).encode())
    emit({"materialized": done})


def changed_files(work_dir, prefix, baseline, exclude):
    """The files under work_dir that are not the baseline: created or changed there."""
    known = {b["path"]: b["sha256"] for b in baseline}
    files = []
    for child, path, st in walk(work_dir, exclude=exclude):
        if stat.S_ISREG(st.st_mode) or stat.S_ISLNK(st.st_mode):
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
            # What cannot be listed or stat'ed (gone already) is passed over; other kinds are not files.
            for child, path, st in walk(at, rel, lenient=True):
                if stat.S_ISLNK(st.st_mode):
                    found.append({"path": child, "link": os.readlink(path)})
                elif stat.S_ISREG(st.st_mode):
                    found.append(entry(path, child))
            out.extend(sorted(found, key=lambda f: f["path"]))
        elif os.path.isfile(at):
            out.append(entry(at, rel))
        else:
            out.append(bare(rel))
    return out


def op_files(r):
    emit({"files": [job_files(r["work_dir"], paths) for paths in r["jobs"]]})
