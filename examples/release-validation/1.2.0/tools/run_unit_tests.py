#!/usr/bin/env python3
"""run_unit_tests: summarise a synthetic unit-test suite.

Nothing is executed: the suite's outcomes are recorded in the run input, and
this tool tallies them, so the result is a pure function of the arguments.

Arguments (one JSON object on stdin):
    {"suite": {"suite": str,
               "cases": [{"name": str, "status": "pass"|"fail"|"skip",
                          "duration_ms": int}, ...]}}
Result (one JSON object on stdout):
    {"suite": str, "total": int, "passed": int, "failed": int, "skipped": int,
     "failures": [str, ...], "duration_ms": int}

Malformed arguments (not an object, a missing or unknown key, a wrong type, an
unknown status) exit 65. Stdlib only, deterministic, writes no files.
"""
import json
import sys

TOOL = "run_unit_tests"
EX_DATAERR = 65
STATUSES = ("pass", "fail", "skip")


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
    check_keys(args, "arguments", ["suite"])
    suite = args["suite"]
    check_keys(suite, "suite", ["suite", "cases"])
    if not isinstance(suite["suite"], str) or not suite["suite"].strip():
        die("suite.suite must be a non-empty string")
    if not isinstance(suite["cases"], list):
        die("suite.cases must be an array")
    counts = {s: 0 for s in STATUSES}
    failures, duration = [], 0
    for i, case in enumerate(suite["cases"]):
        where = f"suite.cases[{i}]"
        check_keys(case, where, ["name", "status", "duration_ms"])
        if not isinstance(case["name"], str) or not case["name"].strip():
            die(f"{where}.name must be a non-empty string")
        if case["status"] not in STATUSES:
            die(f"{where}.status must be one of {', '.join(STATUSES)}")
        if not is_int(case["duration_ms"]) or case["duration_ms"] < 0:
            die(f"{where}.duration_ms must be a non-negative integer")
        counts[case["status"]] += 1
        duration += case["duration_ms"]
        if case["status"] == "fail":
            failures.append(case["name"])
    result = {
        "suite": suite["suite"],
        "total": len(suite["cases"]),
        "passed": counts["pass"],
        "failed": counts["fail"],
        "skipped": counts["skip"],
        "failures": failures,
        "duration_ms": duration,
    }
    print(f"{TOOL}: {result['total']} case(s), {result['failed']} failed", file=sys.stderr)
    sys.stdout.write(json.dumps(result, sort_keys=True, separators=(",", ":")) + "\n")


if __name__ == "__main__":
    main()
