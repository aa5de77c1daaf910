#!/usr/bin/env python3
"""inspect_artifacts: check the declared build artifacts of a synthetic release.

Arguments (one JSON object on stdin):
    {"artifacts": [{"name": str, "sha256": str, "size_bytes": int}, ...]}
Result (one JSON object on stdout):
    {"count": int, "total_bytes": int, "names": [str, ...],
     "invalid": [{"name": str, "problems": [str, ...]}, ...]}

An artifact is invalid when its sha256 is not 64 lowercase hex characters, its
size is not positive, or its name repeats an earlier one; that is a readiness
fact reported in "invalid", not an error. Nothing is read from disk: the
digests are the declared ones. Malformed arguments (not an object, a missing
or unknown key, a wrong type) exit 65. Stdlib only, deterministic, writes no
files.
"""
import json
import re
import sys

TOOL = "inspect_artifacts"
EX_DATAERR = 65
SHA256_HEX = re.compile(r"[0-9a-f]{64}")


def die(message):
    print(f"{TOOL}: invalid arguments: {message}", file=sys.stderr)
    sys.exit(EX_DATAERR)


def read_args():
    try:
        args = json.loads(sys.stdin.buffer.read().decode("utf-8"))
    except (UnicodeDecodeError, ValueError) as e:
        die(f"stdin is not one JSON document ({e})")
    if not isinstance(args, dict):
        die("expected one JSON object of arguments")
    return args


def check_keys(obj, where, required, optional=()):
    if not isinstance(obj, dict):
        die(f"{where} must be an object")
    missing = [k for k in required if k not in obj]
    if missing:
        die(f"{where} is missing {', '.join(repr(k) for k in missing)}")
    unknown = sorted(set(obj) - set(required) - set(optional))
    if unknown:
        die(f"{where} has unknown key(s) {', '.join(repr(k) for k in unknown)}")


def is_int(value):
    return isinstance(value, int) and not isinstance(value, bool)


def main():
    args = read_args()
    check_keys(args, "arguments", ["artifacts"])
    artifacts = args["artifacts"]
    if not isinstance(artifacts, list):
        die("artifacts must be an array")
    names, invalid, seen, total = [], [], set(), 0
    for i, a in enumerate(artifacts):
        where = f"artifacts[{i}]"
        check_keys(a, where, ["name", "sha256", "size_bytes"])
        if not isinstance(a["name"], str) or not a["name"].strip():
            die(f"{where}.name must be a non-empty string")
        if not isinstance(a["sha256"], str):
            die(f"{where}.sha256 must be a string")
        if not is_int(a["size_bytes"]):
            die(f"{where}.size_bytes must be an integer")
        problems = []
        if not SHA256_HEX.fullmatch(a["sha256"]):
            problems.append("sha256 is not 64 lowercase hex characters")
        if a["size_bytes"] <= 0:
            problems.append("size_bytes is not positive")
        if a["name"] in seen:
            problems.append("name is declared more than once")
        seen.add(a["name"])
        names.append(a["name"])
        total += max(a["size_bytes"], 0)
        if problems:
            invalid.append({"name": a["name"], "problems": problems})
    result = {"count": len(artifacts), "total_bytes": total, "names": names, "invalid": invalid}
    print(f"{TOOL}: {len(artifacts)} artifact(s), {len(invalid)} invalid", file=sys.stderr)
    sys.stdout.write(json.dumps(result, sort_keys=True, separators=(",", ":")) + "\n")


if __name__ == "__main__":
    main()
