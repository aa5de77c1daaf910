#!/usr/bin/env python3
"""(Copied from the shared ro-crate recipe, with only the contexts Cairn's crates name.)

Pre-fill the HTTP cache of roc-validator (rocrate-validator >= 0.10) from local files.

rocrate-validator sends every remote JSON-LD @context lookup (rdflib's loader and its
own context checks) through a requests-cache SQLite cache; with
`--offline --cache-path C` it answers only from that cache. This script writes the
JSON-LD context documents kept in ./contexts/ into such a cache, so that an offline
run finds them, without any network access.

Run it with the validator's own venv python (it needs `requests` and
`requests_cache`, both dependencies of roc-validator):

    .venv-rocv/bin/python fill-cache.py CACHE_PATH [--contexts DIR] [--map URL=FILE ...]

CACHE_PATH is the same value later given to `rocrate-validator validate --cache-path`
(requests-cache appends ".sqlite" when it has no suffix). Existing entries for the
same URLs are overwritten; other entries are kept.
Exit status: 0 when every URL was stored and reads back from the cache as JSON, else 1.
"""

from __future__ import annotations

import argparse
import io
import json
import sys
from pathlib import Path

import requests
import requests_cache
import urllib3
from requests.adapters import HTTPAdapter

# URL -> file name under the contexts directory. Each w3id.org permalink is stored
# directly as a 200 response, and so is the URL it redirects to, in case a crate names
# that one. (Redirects: perma-id/w3id.org ro/crate/.htaccess and ro/terms/.htaccess.)
URL_MAP: dict[str, str] = {
    # RO-Crate 1.1 (the context of Workflow/Process/Provenance Run Crate 0.5 crates)
    "https://w3id.org/ro/crate/1.1/context": "ro-crate-1.1-context.jsonld",
    "https://www.researchobject.org/ro-crate/specification/1.1/context.jsonld": "ro-crate-1.1-context.jsonld",
    # Workflow Run terms (sha256, connection, ParameterConnection, resourceUsage, ...)
    "https://w3id.org/ro/terms/workflow-run/context": "workflow-run-context.jsonld",
    "https://www.researchobject.org/ro-terms/workflow-run/context.jsonld": "workflow-run-context.jsonld",
    "https://www.researchobject.org/ro-terms/workflow-run/context.json": "workflow-run-context.jsonld",
}

# The Accept header the validator's JSON-LD loader sends (requests-cache does not
# match headers by default; sent anyway so the stored request looks like the real one).
ACCEPT = "application/ld+json, application/json, */*;q=0.1"


class LocalFileAdapter(HTTPAdapter):
    """Transport adapter that answers GET requests from local files, never the network."""

    def __init__(self, files: dict[str, Path]):
        super().__init__()
        self.files = files

    def send(self, request, **kwargs):  # noqa: ARG002 - same signature as HTTPAdapter.send
        path = self.files.get(request.url)
        if path is None:
            raise requests.exceptions.ConnectionError(
                f"fill-cache: no local file for {request.url} (network disabled)"
            )
        data = path.read_bytes()
        raw = urllib3.HTTPResponse(
            body=io.BytesIO(data),
            status=200,
            reason="OK",
            preload_content=False,
            request_url=request.url,
            headers={"Content-Type": "application/ld+json", "Content-Length": str(len(data))},
        )
        return self.build_response(request, raw)


def open_session(cache_path: str, offline: bool = False) -> requests_cache.CachedSession:
    # Same settings as rocrate_validator.utils.http.HttpRequester uses.
    session = requests_cache.CachedSession(
        cache_name=cache_path,
        backend="sqlite",
        expire_after=-1,
        allowable_methods=("GET",),
        allowable_codes=(200, 302, 404),
    )
    if offline:
        session.settings.only_if_cached = True
    return session


def main(argv: list[str] | None = None) -> int:
    here = Path(__file__).resolve().parent
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("cache_path", help="value for rocrate-validator --cache-path")
    ap.add_argument("--contexts", type=Path, default=here / "contexts", help="folder of context files")
    ap.add_argument("--map", action="append", default=[], metavar="URL=FILE",
                    help="extra URL served from FILE (path absolute or relative to --contexts); repeatable")
    args = ap.parse_args(argv)

    files: dict[str, Path] = {}
    for url, name in URL_MAP.items():
        files[url] = args.contexts / name
    for item in args.map:
        url, sep, name = item.partition("=")
        if not sep or not url.startswith(("http://", "https://")):
            ap.error(f"--map expects URL=FILE, got {item!r}")
        files[url] = (args.contexts / name) if not Path(name).is_absolute() else Path(name)

    failed = 0
    for url, path in files.items():
        if not path.is_file():
            print(f"MISSING FILE {path} (for {url})", file=sys.stderr)
            failed += 1
            continue
        json.loads(path.read_bytes())  # refuse to cache something that is not JSON

    if failed:
        return 1

    session = open_session(args.cache_path)
    adapter = LocalFileAdapter(files)
    session.mount("http://", adapter)
    session.mount("https://", adapter)
    for url in files:
        resp = session.get(url, headers={"Accept": ACCEPT}, force_refresh=True)
        if resp.status_code != 200:
            print(f"FAILED {url}: HTTP {resp.status_code}", file=sys.stderr)
            failed += 1
    session.close()

    # Read every entry back the way the validator will: offline, cache only.
    check = open_session(args.cache_path, offline=True)
    for url, path in files.items():
        resp = check.get(url, headers={"Accept": ACCEPT})
        ok = (
            resp.status_code == 200
            and getattr(resp, "from_cache", False)
            and "application/ld+json" in resp.headers.get("Content-Type", "")
            and isinstance(resp.json().get("@context"), (dict, list))
        )
        print(f"{'cached' if ok else 'NOT CACHED'} {url} <- {path.name}")
        failed += 0 if ok else 1
    db = getattr(check.cache, "db_path", args.cache_path)
    check.close()
    print(f"cache file: {db}; {len(files) - failed}/{len(files)} URLs ready")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
