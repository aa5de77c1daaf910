#!/usr/bin/env python3
"""BENCHMARKS.md's summary table, rendered from the results on record in bench-results/.

Each bench-results/FAMILY.json holds one family's rows (format 1):

    {"format": 1, "family": "dag", "order": 1, "note": "...",
     "rows": [{"id": "dag.build_10k",
               "benchmark": "DAG validation and ordering ..., chain / layered",
               "target": "< 100 ms",                       # null renders "(none set)"
               "measured": "{chain_ms} / {layered_ms} ms",  # a template over the figures
               "figures": {"chain_ms": {"value": 5.8, "unit": "ms"}, ...},
               "met": true,                                 # true "yes", false "**no**", null "—"
               "met_note": null,                            # a template appended to the met cell
               "section": "1. DAG validation and ordering", "command": "cargo bench ...",
               "date": "2026-11-30", "machine": "...",
               "provenance": "transcribed"}]}               # or "recorded"

A template is Python's format syntax over the row's figures: `{name}` is the figure's value,
`{name:.3f}`, `{name:,}` and `{name:+}` format it; a negative number is written with a minus sign
(U+2212); `{{` and `}}` are literal braces. Families are rendered in `order`, rows in file order.

    scripts/bench-table.py                 # print the table
    scripts/bench-table.py --check         # exit 1 if BENCHMARKS.md's table differs from it
    scripts/bench-table.py --write         # rewrite BENCHMARKS.md's table
    scripts/bench-table.py --record FILE   # merge a bench script's results.json into bench-results/

A bench script's results.json is a family file without `provenance` (and `note`): file-level
`section`, `command`, `date` and `machine` are defaults for its rows. Recording replaces the rows
with the same id (in place) and appends new ones, all marked "recorded".

Exit status: 0 done, 1 the table differs (--check), 2 bad input.
"""
import argparse
import json
import os
import string
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
RESULTS = os.path.join(ROOT, "bench-results")
DOC = os.path.join(ROOT, "BENCHMARKS.md")
BEGIN = "<!-- bench-summary:begin -->"
END = "<!-- bench-summary:end -->"
HEADER = ["| benchmark | target | measured | met |", "|---|---|---|---|"]
ROW_FIELDS = ["id", "benchmark", "target", "measured", "figures", "met", "section", "command", "date",
              "machine", "provenance"]
INHERITED = ["section", "command", "date", "machine"]
PROVENANCES = ("transcribed", "recorded")


class BadInput(Exception):
    pass


def rel(path):
    return os.path.relpath(path, os.getcwd())


class Figures(string.Formatter):
    """Formats a template over a row's figures, naming the row and field on a bad name."""

    def __init__(self, where, figures):
        super().__init__()
        self.where, self.figures = where, figures

    def get_value(self, key, args, kwargs):
        if isinstance(key, int) or key not in self.figures:
            raise BadInput(f"{self.where}: unknown figure {{{key}}} (figures: {', '.join(sorted(self.figures)) or 'none'})")
        return self.figures[key]["value"]

    def format_field(self, value, spec):
        try:
            text = format(value, spec)
        except ValueError as e:
            raise BadInput(f"{self.where}: bad format spec {spec!r}: {e}") from None
        return "\u2212" + text[1:] if text.startswith("-") else text


def render_template(where, template, figures):
    try:
        return Figures(where, figures).format(template)
    except (ValueError, IndexError, KeyError) as e:
        raise BadInput(f"{where}: bad template {template!r}: {e}") from None


def check_row(where, row, *, recorded=False):
    if not isinstance(row, dict):
        raise BadInput(f"{where}: a row must be an object")
    fields = [f for f in ROW_FIELDS if not (recorded and f == "provenance")]
    for field in fields:
        if field not in row:
            raise BadInput(f"{where}: missing field `{field}`")
    where = f"{where} ({row['id']})" if isinstance(row["id"], str) else where
    for field in ["id", "benchmark", "measured", "section", "command", "date", "machine"]:
        if not isinstance(row[field], str) or not row[field]:
            raise BadInput(f"{where}: field `{field}` must be a non-empty string")
    if row["target"] is not None and not isinstance(row["target"], str):
        raise BadInput(f"{where}: field `target` must be a string or null")
    if row["met"] not in (True, False, None):
        raise BadInput(f"{where}: field `met` must be true, false or null")
    if row.get("met_note") is not None and not isinstance(row["met_note"], str):
        raise BadInput(f"{where}: field `met_note` must be a string or null")
    if not recorded and row["provenance"] not in PROVENANCES:
        raise BadInput(f"{where}: field `provenance` must be one of {', '.join(PROVENANCES)}")
    if not isinstance(row["figures"], dict):
        raise BadInput(f"{where}: field `figures` must be an object")
    for name, fig in row["figures"].items():
        if not isinstance(fig, dict) or set(fig) != {"value", "unit"}:
            raise BadInput(f"{where}: figures.{name} must be {{\"value\": number, \"unit\": string}}")
        if isinstance(fig["value"], bool) or not isinstance(fig["value"], (int, float)):
            raise BadInput(f"{where}: figures.{name}.value must be a number")
        if not isinstance(fig["unit"], str):
            raise BadInput(f"{where}: figures.{name}.unit must be a string")
    # Render now, so an unknown figure is reported with its file.
    render_template(f"{where}: field `measured`", row["measured"], row["figures"])
    if row.get("met_note"):
        render_template(f"{where}: field `met_note`", row["met_note"], row["figures"])


def load_json(path):
    try:
        with open(path, encoding="utf-8") as f:
            return json.load(f)
    except json.JSONDecodeError as e:
        raise BadInput(f"{rel(path)}: malformed JSON: {e}") from None
    except OSError as e:
        raise BadInput(f"{rel(path)}: cannot read: {e.strerror}") from None


def check_family(path, data, *, recorded=False):
    name = rel(path)
    if not isinstance(data, dict):
        raise BadInput(f"{name}: must be an object")
    if data.get("format") != 1:
        raise BadInput(f"{name}: field `format` must be 1")
    if not isinstance(data.get("family"), str) or not data["family"]:
        raise BadInput(f"{name}: missing field `family`")
    if not recorded:
        if data["family"] + ".json" != os.path.basename(path):
            raise BadInput(f"{name}: field `family` is {data['family']!r}, but the file is {os.path.basename(path)}")
        if isinstance(data.get("order"), bool) or not isinstance(data.get("order"), (int, float)):
            raise BadInput(f"{name}: field `order` must be a number")
    if not isinstance(data.get("rows"), list):
        raise BadInput(f"{name}: field `rows` must be a list")
    seen = set()
    for i, row in enumerate(data["rows"]):
        if recorded and isinstance(row, dict):
            for field in INHERITED:
                if field not in row and field in data:
                    row[field] = data[field]
        check_row(f"{name}: rows[{i}]", row, recorded=recorded)
        if not row["id"].startswith(data["family"] + "."):
            raise BadInput(f"{name}: rows[{i}]: field `id` {row['id']!r} must start with `{data['family']}.`")
        if row["id"] in seen:
            raise BadInput(f"{name}: rows[{i}]: field `id` {row['id']!r} appears twice")
        seen.add(row["id"])


def load_families():
    if not os.path.isdir(RESULTS):
        raise BadInput(f"{rel(RESULTS)}: no such directory")
    families = []
    for entry in sorted(os.listdir(RESULTS)):
        if entry.endswith(".json"):
            path = os.path.join(RESULTS, entry)
            data = load_json(path)
            check_family(path, data)
            families.append(data)
    ids = {}
    for fam in families:
        for row in fam["rows"]:
            if row["id"] in ids:
                raise BadInput(f"bench-results/{fam['family']}.json: id {row['id']!r} is also in {ids[row['id']]}")
            ids[row["id"]] = f"bench-results/{fam['family']}.json"
    families.sort(key=lambda f: (f["order"], f["family"]))
    return families


def cell(text):
    return text.replace("|", "\\|").replace("\n", " ")


def render_row(fam, row):
    where = f"bench-results/{fam['family']}.json ({row['id']})"
    measured = render_template(f"{where}: field `measured`", row["measured"], row["figures"])
    met = {True: "yes", False: "**no**", None: "—"}[row["met"]]
    if row.get("met_note"):
        met += render_template(f"{where}: field `met_note`", row["met_note"], row["figures"])
    target = row["target"] if row["target"] is not None else "(none set)"
    return f"| {row['benchmark']} | {target} | {measured} | {met} |"


def render():
    lines = list(HEADER)
    for fam in load_families():
        lines += [render_row(fam, row) for row in fam["rows"]]
    return lines


def doc_region():
    with open(DOC, encoding="utf-8") as f:
        text = f.read()
    b, e = text.find(BEGIN), text.find(END)
    if b < 0 or e < 0 or e < b:
        raise BadInput(f"{rel(DOC)}: no `{BEGIN}` … `{END}` region")
    start = b + len(BEGIN)
    return text, start, e


def check():
    text, start, end = doc_region()
    have = text[start:end].strip("\n").split("\n")
    want = render()
    first_line = text[:start].count("\n") + 2  # the line after the begin marker
    for i in range(max(len(have), len(want))):
        h = have[i] if i < len(have) else "(nothing)"
        w = want[i] if i < len(want) else "(nothing)"
        if h != w:
            print(f"{rel(DOC)}:{first_line + i}: the summary table differs from bench-results/ "
                  f"(regenerate with scripts/bench-table.py --write)\n  in the file: {h}\n  rendered:    {w}",
                  file=sys.stderr)
            return 1
    return 0


def write():
    text, start, end = doc_region()
    new = text[:start] + "\n" + "\n".join(render()) + "\n" + text[end:]
    if new != text:
        with open(DOC, "w", encoding="utf-8") as f:
            f.write(new)
        print(f"{rel(DOC)}: summary table rewritten", file=sys.stderr)
    return 0


def dump(path, data):
    tmp = path + ".tmp"
    with open(tmp, "w", encoding="utf-8") as f:
        json.dump(data, f, indent=2, ensure_ascii=False)
        f.write("\n")
    os.replace(tmp, path)


def record(path):
    data = load_json(path)
    check_family(path, data, recorded=True)
    target = os.path.join(RESULTS, data["family"] + ".json")
    if os.path.exists(target):
        fam = load_json(target)
        check_family(target, fam)
    else:
        if isinstance(data.get("order"), bool) or not isinstance(data.get("order"), (int, float)):
            raise BadInput(f"{rel(path)}: field `order` is needed to start {rel(target)}")
        fam = {"format": 1, "family": data["family"], "order": data["order"],
               "note": f"Rows recorded by `{data.get('command', 'a bench script')}` (results.json).",
               "rows": []}
    index = {row["id"]: i for i, row in enumerate(fam["rows"])}
    for row in data["rows"]:
        new = {field: row[field] for field in ROW_FIELDS if field != "provenance"}
        new["met_note"] = row.get("met_note")
        new["provenance"] = "recorded"
        if new["id"] in index:
            fam["rows"][index[new["id"]]] = new
            print(f"{rel(target)}: {new['id']} replaced", file=sys.stderr)
        else:
            index[new["id"]] = len(fam["rows"])
            fam["rows"].append(new)
            print(f"{rel(target)}: {new['id']} added", file=sys.stderr)
    check_family(target, fam)
    os.makedirs(RESULTS, exist_ok=True)
    dump(target, fam)
    return 0


def main():
    p = argparse.ArgumentParser(description="BENCHMARKS.md's summary table from bench-results/*.json")
    g = p.add_mutually_exclusive_group()
    g.add_argument("--check", action="store_true", help="exit 1 if BENCHMARKS.md's table differs")
    g.add_argument("--write", action="store_true", help="rewrite BENCHMARKS.md's table")
    g.add_argument("--record", metavar="FILE", help="merge a bench script's results.json into bench-results/")
    args = p.parse_args()
    try:
        if args.check:
            return check()
        if args.write:
            return write()
        if args.record:
            return record(args.record)
        print("\n".join(render()))
        return 0
    except BadInput as e:
        print(f"bench-table: {e}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
