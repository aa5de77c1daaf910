#!/usr/bin/env python3
"""load_manifest: read the release header of a synthetic release manifest.

Arguments (one JSON object on stdin):
    {"product": str, "release": str}
Result (one JSON object on stdout):
    {"product": str, "release": str, "semver_valid": bool,
     "major": int|null, "minor": int|null, "patch": int|null, "prerelease": bool}

A release string that is not MAJOR.MINOR.PATCH[-PRE][+BUILD] is a readiness
fact (semver_valid = false), not an error. Malformed arguments (not an object,
a missing or unknown key, a wrong type) exit 65. Stdlib only, deterministic,
writes no files.
"""
import json
import re
import sys

TOOL = "load_manifest"
EX_DATAERR = 65
SEMVER = re.compile(
    r"(0|[1-9][0-9]*)\.(0|[1-9][0-9]*)\.(0|[1-9][0-9]*)"
    r"(?:-([0-9A-Za-z-]+(?:\.[0-9A-Za-z-]+)*))?"
    r"(?:\+[0-9A-Za-z-]+(?:\.[0-9A-Za-z-]+)*)?"
)


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
    missing = [k for k in required if k not in obj]
    if missing:
        die(f"{where} is missing {', '.join(repr(k) for k in missing)}")
    unknown = sorted(set(obj) - set(required) - set(optional))
    if unknown:
        die(f"{where} has unknown key(s) {', '.join(repr(k) for k in unknown)}")


def string(value, where):
    if not isinstance(value, str) or not value.strip():
        die(f"{where} must be a non-empty string")
    return value


def main():
    args = read_args()
    check_keys(args, "arguments", ["product", "release"])
    product = string(args["product"], "product")
    release = string(args["release"], "release")
    m = SEMVER.fullmatch(release)
    result = {
        "product": product,
        "release": release,
        "semver_valid": m is not None,
        "major": int(m.group(1)) if m else None,
        "minor": int(m.group(2)) if m else None,
        "patch": int(m.group(3)) if m else None,
        "prerelease": bool(m and m.group(4)),
    }
    print(f"{TOOL}: {product} {release} (semver_valid={result['semver_valid']})", file=sys.stderr)
    sys.stdout.write(json.dumps(result, sort_keys=True, separators=(",", ":")) + "\n")


if __name__ == "__main__":
    main()
