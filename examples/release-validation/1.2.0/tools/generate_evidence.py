#!/usr/bin/env python3
"""generate_evidence: combine the five root checks into one evidence summary.

Arguments (one JSON object on stdin), each the completed result of a root step:
    {"manifest":      <load_manifest result>,
     "artifacts":     <inspect_artifacts result>,
     "tests":         <run_unit_tests result>,
     "compatibility": <run_compatibility result>,
     "deployment":    <inspect_deployment result>}
Result (one JSON object on stdout):
    {"product": str, "release": str,
     "checks": {"manifest": bool, "artifacts": bool, "unit_tests": bool,
                "compatibility": bool, "deployment": bool},
     "failing_checks": [str, ...],
     "artifacts_match_release": bool, "mismatched_artifacts": [str, ...],
     "ready_candidate": bool, "evidence_sha256": str}

The checks are this tool's own summary of the evidence (manifest: semver
release; artifacts: at least one, none invalid; unit_tests: at least one case,
none failed; compatibility: at least one combination, none unsupported;
deployment: at least one replica and a rollback plan). artifacts_match_release
is the one cross-step fact: every artifact name contains the release string.
evidence_sha256 is the SHA-256 of the arguments as sorted-key compact JSON, a
fingerprint of exactly the evidence combined. READY or BLOCKED is decided by
the workflow's validator rules, not by ready_candidate.

It also writes the evidence report, in its working directory (the step's
directory): evidence.json (the result, pretty) and evidence-report.md (the
same, for a person). The workflow declares both as the step's outputs.

Malformed arguments (not an object, a missing or unknown key, a wrong type)
exit 65. Stdlib only, deterministic.
"""
import hashlib
import json
import sys

TOOL = "generate_evidence"
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
    missing = [k for k in required if k not in obj]
    if missing:
        die(f"{where} is missing {', '.join(repr(k) for k in missing)}")
    unknown = sorted(set(obj) - set(required) - set(optional))
    if unknown:
        die(f"{where} has unknown key(s) {', '.join(repr(k) for k in unknown)}")


def is_int(value):
    return isinstance(value, int) and not isinstance(value, bool)


# The fields each upstream result must carry (others are ignored), with their types.
SHAPES = {
    "manifest": {"product": str, "release": str, "semver_valid": bool},
    "artifacts": {"count": int, "names": list, "invalid": list},
    "tests": {"total": int, "failed": int, "failures": list},
    "compatibility": {"checked": int, "supported": int, "unsupported": list},
    "deployment": {"replicas": int, "has_rollback_plan": bool},
}


def shaped(args, name):
    value = args[name]
    if not isinstance(value, dict):
        die(f"{name} must be an object (the {name} step's result)")
    for key, kind in SHAPES[name].items():
        if key not in value:
            die(f"{name} is missing {key!r}")
        ok = is_int(value[key]) if kind is int else isinstance(value[key], kind)
        if not ok:
            die(f"{name}.{key} must be of type {kind.__name__}")
    return value


def write_report(result, tests, compat):
    """The evidence report: the result as JSON, and the same in words."""
    with open("evidence.json", "w", encoding="utf-8") as f:
        json.dump(result, f, sort_keys=True, indent=2)
        f.write("\n")
    lines = [
        f"# Evidence report: {result['product']} {result['release']}",
        "",
        "| check | holds |",
        "|---|---|",
        *[f"| {name} | {'yes' if ok else 'no'} |" for name, ok in result["checks"].items()],
        "",
        f"Unit tests: {tests['total']} run, {tests['failed']} failed"
        + (f" ({', '.join(tests['failures'])})" if tests["failures"] else "") + ".",
        f"Compatibility: {compat['supported']} of {compat['checked']} combinations supported.",
        f"Artifacts match the release: {'yes' if result['artifacts_match_release'] else 'no'}.",
        "",
        f"Evidence fingerprint (SHA-256 of the combined arguments): `{result['evidence_sha256']}`",
        "",
    ]
    with open("evidence-report.md", "w", encoding="utf-8") as f:
        f.write("\n".join(lines))


def main():
    args = read_args()
    check_keys(args, "arguments", list(SHAPES))
    manifest, artifacts, tests, compat, deployment = (shaped(args, n) for n in SHAPES)
    if not all(isinstance(n, str) for n in artifacts["names"]):
        die("artifacts.names must be an array of strings")
    release = manifest["release"]
    mismatched = [n for n in artifacts["names"] if release not in n]
    checks = {
        "manifest": manifest["semver_valid"],
        "artifacts": artifacts["count"] > 0 and not artifacts["invalid"],
        "unit_tests": tests["total"] > 0 and tests["failed"] == 0,
        "compatibility": compat["checked"] > 0 and not compat["unsupported"],
        "deployment": deployment["replicas"] > 0 and deployment["has_rollback_plan"],
    }
    failing = [name for name, ok in checks.items() if not ok]
    canonical = json.dumps(args, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    result = {
        "product": manifest["product"],
        "release": release,
        "checks": checks,
        "failing_checks": failing,
        "artifacts_match_release": not mismatched,
        "mismatched_artifacts": mismatched,
        "ready_candidate": not failing and not mismatched,
        "evidence_sha256": hashlib.sha256(canonical.encode("utf-8")).hexdigest(),
    }
    write_report(result, tests, compat)
    print(
        f"{TOOL}: {manifest['product']} {release}: "
        f"{'no failing checks' if not failing else 'failing ' + ', '.join(failing)}",
        file=sys.stderr,
    )
    sys.stdout.write(json.dumps(result, sort_keys=True, separators=(",", ":")) + "\n")


if __name__ == "__main__":
    main()
