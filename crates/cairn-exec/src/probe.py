# Cairn's target probe: read-only, stdlib only. It observes and reports; it changes nothing.
import json, os, platform, shutil, subprocess, sys

WORKSPACE = bytes.fromhex("__WORKSPACE_HEX__").decode("utf-8")


def version(argv, env=None):
    exe = shutil.which(argv[0])
    if not exe:
        return None
    try:
        out = subprocess.run([exe] + argv[1:], capture_output=True, text=True, timeout=20,
                             env=env, stdin=subprocess.DEVNULL)
        lines = ((out.stdout or "") + (out.stderr or "")).strip().splitlines()
        return {"path": exe, "version": lines[0].strip() if lines else ""}
    except Exception as e:  # a version that cannot be read is reported, not guessed
        return {"path": exe, "error": str(e)}


def os_name():
    try:
        with open("/etc/os-release") as f:
            for line in f:
                if line.startswith("PRETTY_NAME="):
                    return line.split("=", 1)[1].strip().strip('"')
    except OSError:
        pass
    return platform.system()


def memory():
    facts = {}
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                key, _, rest = line.partition(":")
                if key in ("MemTotal", "MemAvailable"):
                    facts[key] = int(rest.split()[0]) * 1024
    except OSError:
        pass
    return {"total_bytes": facts.get("MemTotal"), "available_bytes": facts.get("MemAvailable")}


def workspace():
    probe = WORKSPACE
    while probe != "/" and not os.path.exists(probe):
        probe = os.path.dirname(probe) or "/"
    usage = shutil.disk_usage(probe)
    return {"path": WORKSPACE, "exists": os.path.isdir(WORKSPACE), "nearest_existing": probe,
            "writable": os.access(probe, os.W_OK), "free_bytes": usage.free}


def snakemake_version():
    """Snakemake's version from its package metadata, read by the interpreter its launcher names
    (about 40 ms); `snakemake --version` imports all of Snakemake (over a second) and is only the
    fallback."""
    exe = shutil.which("snakemake")
    if not exe:
        return None
    try:
        with open(exe, "rb") as f:
            first = f.readline().decode("utf-8", "replace").strip()
        interpreter = first[2:].strip().split()[0] if first.startswith("#!") else ""
        if interpreter and os.path.isabs(interpreter):
            out = subprocess.run([interpreter, "-c", "from importlib.metadata import version; print(version('snakemake'))"],
                                 capture_output=True, text=True, timeout=20, stdin=subprocess.DEVNULL)
            text = out.stdout.strip()
            if out.returncode == 0 and text:
                return {"path": exe, "version": text}
    except (OSError, subprocess.SubprocessError, IndexError):
        pass
    return version(["snakemake", "--version"])


docker_host = os.environ.get("DOCKER_HOST")
uname = platform.uname()
facts = {
    "hostname": uname.node,
    "os": os_name(),
    "kernel": uname.release,
    "machine": uname.machine,
    "cpus": os.cpu_count(),
    "memory": memory(),
    "workspace": workspace(),
    "python": {"path": sys.executable, "version": platform.python_version()},
    "snakemake": snakemake_version(),
    "nextflow": version(["nextflow", "-version"], env=dict(os.environ, NXF_OFFLINE="true")),
    "java": version(["java", "-version"]),
    "slurm": {c: shutil.which(c) for c in ("sbatch", "squeue", "scancel", "scontrol")},
    "docker_host": {"value": docker_host,
                    "refused": bool(docker_host) and not docker_host.startswith("unix://")},
}
sys.stdout.write(json.dumps(facts))
