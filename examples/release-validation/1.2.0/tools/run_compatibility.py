#!/usr/bin/env python3
"""run_compatibility: summarise a synthetic platform compatibility matrix.

Nothing is executed: each matrix entry records whether the platform and
Python version are supported, and this tool tallies them.

Arguments (one JSON object on stdin):
    {"compatibility": {"matrix": [{"platform": str, "python": str,
                                   "supported": bool}, ...]}}
Result (one JSON object on stdout):
    {"checked": int, "supported": int, "unsupported": [str, ...],
     "platforms": [str, ...], "pythons": [str, ...]}
where each "unsupported" entry is "<platform>/py<python>", and "platforms"
and "pythons" are sorted and distinct.

Malformed arguments (not an object, a missing or unknown key, a wrong type)
exit 65. Stdlib only, deterministic, writes no files.
"""
import json
import sys

TOOL = "run_compatibility"
EX_DATAERR = 65


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


def main():
    args = read_args()
    check_keys(args, "arguments", ["compatibility"])
    compat = args["compatibility"]
    check_keys(compat, "compatibility", ["matrix"])
    if not isinstance(compat["matrix"], list):
        die("compatibility.matrix must be an array")
    supported, unsupported, platforms, pythons = 0, [], set(), set()
    for i, entry in enumerate(compat["matrix"]):
        where = f"compatibility.matrix[{i}]"
        check_keys(entry, where, ["platform", "python", "supported"])
        for key in ("platform", "python"):
            if not isinstance(entry[key], str) or not entry[key].strip():
                die(f"{where}.{key} must be a non-empty string")
        if not isinstance(entry["supported"], bool):
            die(f"{where}.supported must be true or false")
        platforms.add(entry["platform"])
        pythons.add(entry["python"])
        if entry["supported"]:
            supported += 1
        else:
            unsupported.append(f"{entry['platform']}/py{entry['python']}")
    result = {
        "checked": len(compat["matrix"]),
        "supported": supported,
        "unsupported": unsupported,
        "platforms": sorted(platforms),
        "pythons": sorted(pythons),
    }
    print(f"{TOOL}: {result['checked']} combination(s), {len(unsupported)} unsupported", file=sys.stderr)
    sys.stdout.write(json.dumps(result, sort_keys=True, separators=(",", ":")) + "\n")


if __name__ == "__main__":
    main()
