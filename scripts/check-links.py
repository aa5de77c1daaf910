#!/usr/bin/env python3
"""Checks every link of a built HTML book (mdBook's output): each relative link must lead to a
file of the book, and each #anchor to an id in its page. External (http/https) links are listed,
not fetched: CI has no network.

usage: scripts/check-links.py BOOK_DIR    exit 0 when every link resolves, 1 when one is dead.
"""

import os
import sys
from html.parser import HTMLParser
from urllib.parse import unquote, urldefrag, urlsplit

# Attributes that hold a link, by tag.
LINK_ATTRS = {"a": "href", "link": "href", "script": "src", "img": "src", "iframe": "src", "source": "src"}


class Page(HTMLParser):
    """One page's ids, its links (with their line) and its <base href>, if any."""

    def __init__(self):
        super().__init__(convert_charrefs=True)
        self.ids = set()
        self.links = []
        self.base = None

    def handle_starttag(self, tag, attrs):
        attrs = dict(attrs)
        for key in ("id", "name") if tag == "a" else ("id",):
            if attrs.get(key):
                self.ids.add(attrs[key])
        if tag == "base" and attrs.get("href"):
            self.base = attrs["href"]
        name = LINK_ATTRS.get(tag)
        if name and attrs.get(name) is not None:
            self.links.append((attrs[name], self.getpos()[0]))


def parse(path):
    page = Page()
    with open(path, encoding="utf-8") as f:
        page.feed(f.read())
    page.close()
    return page


def check(book):
    """The dead links (file, line, link, why) and the external links (sorted, unique)."""
    book = os.path.abspath(book)
    pages = {}
    for root, _, files in os.walk(book):
        for name in files:
            if name.endswith(".html"):
                path = os.path.join(root, name)
                pages[path] = parse(path)
    dead, external = [], set()
    for path, page in sorted(pages.items()):
        rel = os.path.relpath(path, book)
        for link, line in page.links:
            scheme = urlsplit(link).scheme
            if scheme in ("http", "https"):
                external.add(link)
                continue
            if scheme in ("mailto", "javascript", "data"):
                continue
            target, fragment = urldefrag(link)
            target = unquote(urlsplit(target).path)
            if not target:
                target_file = path
            else:
                # mdBook's 404 page resolves its links against the book's root (<base href="/">).
                if target.startswith("/"):
                    start = book
                    target = target.lstrip("/")
                elif page.base is not None and page.base.startswith("/"):
                    start = os.path.join(book, page.base.lstrip("/"))
                else:
                    start = os.path.dirname(path)
                target_file = os.path.normpath(os.path.join(start, target))
                if os.path.isdir(target_file):
                    target_file = os.path.join(target_file, "index.html")
                if not target_file.startswith(book + os.sep) and target_file != book:
                    dead.append((rel, line, link, "leads outside the book"))
                    continue
                if not os.path.isfile(target_file):
                    dead.append((rel, line, link, "no such file"))
                    continue
            if fragment and target_file.endswith(".html"):
                ids = pages[target_file].ids if target_file in pages else parse(target_file).ids
                if unquote(fragment) not in ids:
                    dead.append((rel, line, link, f"no id `{unquote(fragment)}` in {os.path.relpath(target_file, book)}"))
    return dead, sorted(external)


def main():
    if len(sys.argv) != 2 or not os.path.isdir(sys.argv[1]):
        print("usage: scripts/check-links.py BOOK_DIR (a built book, e.g. docs/book)", file=sys.stderr)
        return 2
    dead, external = check(sys.argv[1])
    if external:
        print(f"{len(external)} external links (listed, not fetched):")
        for link in external:
            print(f"  {link}")
    for rel, line, link, why in dead:
        print(f"dead link: {rel}:{line}: {link}: {why}", file=sys.stderr)
    if dead:
        print(f"{len(dead)} dead links in {sys.argv[1]}", file=sys.stderr)
        return 1
    print(f"every link of {sys.argv[1]} resolves")
    return 0


if __name__ == "__main__":
    sys.exit(main())
