#!/usr/bin/env python3
"""inspect_deployment: summarise the synthetic deployment plan of a release.

Arguments (one JSON object on stdin):
    {"deployment": {"environment": str, "replicas": int, "strategy": str,
                    "rollback_plan": str|null (optional)}}
Result (one JSON object on stdout):
    {"environment": str, "replicas": int, "strategy": str,
     "has_rollback_plan": bool}

A missing, null or blank rollback_plan gives has_rollback_plan = false; that
is a readiness fact, not an error. Malformed arguments (not an object, a
missing or unknown key, a wrong type) exit 65. Stdlib only, deterministic,
writes no files.
"""
import json
import sys

TOOL = "inspect_deployment"
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


def is_int(value):
    return isinstance(value, int) and not isinstance(value, bool)


def main():
    args = read_args()
    check_keys(args, "arguments", ["deployment"])
    dep = args["deployment"]
    check_keys(dep, "deployment", ["environment", "replicas", "strategy"], ["rollback_plan"])
    for key in ("environment", "strategy"):
        if not isinstance(dep[key], str) or not dep[key].strip():
            die(f"deployment.{key} must be a non-empty string")
    if not is_int(dep["replicas"]):
        die("deployment.replicas must be an integer")
    plan = dep.get("rollback_plan")
    if plan is not None and not isinstance(plan, str):
        die("deployment.rollback_plan must be a string or null")
    result = {
        "environment": dep["environment"],
        "replicas": dep["replicas"],
        "strategy": dep["strategy"],
        "has_rollback_plan": bool(plan and plan.strip()),
    }
    print(
        f"{TOOL}: {result['environment']} x{result['replicas']} {result['strategy']}, "
        f"rollback plan: {'yes' if result['has_rollback_plan'] else 'no'}",
        file=sys.stderr,
    )
    sys.stdout.write(json.dumps(result, sort_keys=True, separators=(",", ":")) + "\n")


if __name__ == "__main__":
    main()
