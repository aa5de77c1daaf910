# Files on the target, by the rules and words of `cairn_exec::artifacts`, written once here: a
# file's size and SHA-256, a symlink recorded as its target's text and never followed, the one walk
# of a folder, recorded paths checked against their root; and the small file operations the
# requests share.
import hashlib, json, os, stat

from agent_wire import fail


def hash_file(path):
    """A file's size and SHA-256: the one hash of a file's bytes on the target (as artifacts.rs's
    hash_file)."""
    h, size = hashlib.sha256(), 0
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            size += len(chunk)
            h.update(chunk)
    return size, h.hexdigest()


def link_digest(target):
    """As cairn_core::artifact::link_digest: what a symlink artifact is recorded and checked as."""
    return hashlib.sha256(b"symlink\0" + os.fsencode(target)).hexdigest()


def kind_of(st):
    if stat.S_ISLNK(st.st_mode):
        return "a symlink"
    if stat.S_ISDIR(st.st_mode):
        return "a folder"
    if stat.S_ISREG(st.st_mode):
        return "a file"
    return "not a regular file (a device, socket or pipe)"


def safe_relative(rel):
    return bool(rel) and not rel.startswith("/") and all(p not in ("", ".", "..") for p in rel.split("/"))


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


def inside(root, rel):
    """root/rel, once `rel` is a safe relative path reached through no symlink; else the request fails."""
    if not safe_relative(rel) or symlinked_component(root, rel) is not None:
        fail("recorded artifact path `%s` is not inside its run directory" % rel)
    return os.path.join(root, rel)


def walk(top, rel="", exclude=(), unlistable=None, lenient=False):
    """Every entry below folder `top` that is not a folder, as (its path relative to the walk's root,
    `rel` being top's; its path; its lstat), depth first. A symlink is an entry, never followed.
    `exclude` names top-level entries passed over. A folder that cannot be listed raises its error,
    or what `unlistable(folder, error)` returns; with `lenient`, such a folder and an entry that
    cannot be stat'ed are passed over."""
    stack = [(top, rel)]
    while stack:
        at, rel_at = stack.pop()
        try:
            names = os.listdir(at)
        except OSError as e:
            if lenient:
                continue
            if unlistable is None:
                raise
            raise unlistable(at, e)
        for name in names:
            if not rel_at and name in exclude:
                continue
            path, child = os.path.join(at, name), (rel_at + "/" + name if rel_at else name)
            try:
                st = os.lstat(path)
            except OSError:
                if lenient:
                    continue
                raise
            if stat.S_ISDIR(st.st_mode):
                stack.append((path, child))
            else:
                yield child, path, st


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


def plain_files(d):
    """The names of the regular files in folder `d` itself (a symlink is none), sorted."""
    return sorted(n for n in os.listdir(d) if os.path.isfile(os.path.join(d, n)) and not os.path.islink(os.path.join(d, n)))


def state_digest(d):
    """As artifacts.rs's state_digest: SHA-256 over the folder's files' names and SHA-256s."""
    try:
        files = plain_files(d)
    except FileNotFoundError:
        return None
    listing = "".join("%s  %s\n" % (hash_file(os.path.join(d, n))[1], n) for n in files)
    return hashlib.sha256(listing.encode()).hexdigest()


def place_link(target, dest):
    """As artifacts.rs's place_link: the symlink made beside dest and renamed into place."""
    tmp = os.path.join(os.path.dirname(dest), ".%s.cairn-link" % os.path.basename(dest))
    if os.path.lexists(tmp):
        os.unlink(tmp)
    os.symlink(target, tmp)
    os.rename(tmp, dest)


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


def disk_space(paths):
    """The room left on the filesystems holding `paths` (a path not made yet counts as its nearest
    existing folder), each once, as cairn_exec::space::disk_space reads it here: [{path: its mount
    point, free_bytes, free_inodes (absent where the filesystem counts none)}]. A path nothing of
    which can be read is left out."""
    disks = []
    for p in paths:
        p = os.path.realpath(p)
        while not os.path.exists(p) and os.path.dirname(p) != p:
            p = os.path.dirname(p)
        try:
            st, dev = os.statvfs(p), os.stat(p).st_dev
        except OSError:
            continue
        top = p
        while os.path.dirname(top) != top:
            try:
                if os.stat(os.path.dirname(top)).st_dev != dev:
                    break
            except OSError:
                break
            top = os.path.dirname(top)
        disk = {"path": top, "free_bytes": st.f_bavail * max(st.f_frsize, 1)}
        if st.f_files > 0:
            disk["free_inodes"] = st.f_favail
        if all(d["path"] != top for d in disks):
            disks.append(disk)
    return disks
