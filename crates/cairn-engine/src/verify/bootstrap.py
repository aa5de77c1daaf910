# Cairn bootstrap: the only code run before the document's first cell. Standard library only,
# so this notebook re-runs under plain `jupyter nbconvert --execute` without Cairn installed.
# It runs your kernel plugins from $CAIRN_CONFIG/kernel/*.py (default ~/.config/cairn/kernel)
# into the namespace, last, fail-open: a missing or failing plugin binds nothing.
def _cairn_bootstrap():
    import glob, hashlib, os, platform, sys
    base = os.environ.get("CAIRN_CONFIG") or os.path.join(
        os.environ.get("XDG_CONFIG_HOME") or os.path.expanduser("~/.config"), "cairn")
    loaded, failed = [], []
    for path in sorted(glob.glob(os.path.join(base, "kernel", "*.py"))):
        name = os.path.basename(path)
        try:
            with open(path, encoding="utf-8") as f:
                exec(compile(f.read(), path, "exec"), globals())
            loaded.append(name)
        except Exception as e:
            failed.append(f"{name}({type(e).__name__})")
    # The installed distributions, by their metadata folder names (name-version): listing the
    # folders is cheap, reading every package's metadata is not.
    dists = sorted({n for p in sys.path if os.path.isdir(p) for n in os.listdir(p)
                    if n.endswith((".dist-info", ".egg-info"))})
    ipk = next((n[len("ipykernel-"):].split(".dist-info")[0] for n in dists
                if n.startswith("ipykernel-")), "unknown")
    env = hashlib.sha256("\n".join([platform.python_version()] + dists).encode()).hexdigest()
    print(f"[cairn] python={platform.python_version()} ipykernel={ipk} env={env} "
          f"plugins={','.join(loaded) or '-'} failed={','.join(failed) or '-'}")
_cairn_bootstrap()
del _cairn_bootstrap
