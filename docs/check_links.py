"""Check the internal links of the built site offline: every page, file and anchor exists.

``sphinx -b linkcheck`` fetches external links over the network; this check reads only
the built HTML. Every ``href`` and ``src`` that is not an external address must name a
file of the site, and a ``#fragment`` must be an ``id`` (or a named anchor) of that
file. Usage: ``python docs/check_links.py docs/_build/html``; the exit status is the
number of broken links (capped at 1), each printed as ``page: link``.
"""

from __future__ import annotations

import sys
from html.parser import HTMLParser
from pathlib import Path
from urllib.parse import unquote, urlsplit

# Links that leave the site, or are not links to a document at all.
EXTERNAL_SCHEMES = {"http", "https", "mailto", "ftp", "data", "javascript", "tel"}


class _Page(HTMLParser):
    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.ids: set[str] = set()
        self.links: list[str] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        values = dict(attrs)
        for key in ("id", "name") if tag == "a" else ("id",):
            if values.get(key):
                self.ids.add(values[key])
        for key in ("href", "src"):
            link = values.get(key)
            # <link rel="preload"> and friends point at theme assets: checked like any file.
            if link:
                self.links.append(link)


def _parse(path: Path) -> _Page:
    page = _Page()
    page.feed(path.read_text(encoding="utf-8", errors="replace"))
    return page


def broken_links(root: Path) -> list[str]:
    """``page: link`` for every internal link of the site under ``root`` that does not resolve."""
    root = root.resolve()
    # _static holds the theme's assets (a Jinja macro file among them), not pages.
    pages = {
        path: _parse(path)
        for path in sorted(root.rglob("*.html"))
        if "_static" not in path.relative_to(root).parts
    }
    broken = []
    for path, page in pages.items():
        for link in page.links:
            parts = urlsplit(link)
            if parts.scheme in EXTERNAL_SCHEMES or parts.netloc or link.startswith("//"):
                continue
            target = path if not parts.path else (path.parent / unquote(parts.path)).resolve()
            if target.is_dir():
                target = target / "index.html"
            if not target.is_relative_to(root) or not target.exists():
                broken.append(f"{path.relative_to(root)}: {link} (no such file)")
                continue
            fragment = unquote(parts.fragment)
            if fragment and target.suffix == ".html":
                ids = pages[target].ids if target in pages else _parse(target).ids
                if fragment not in ids:
                    broken.append(f"{path.relative_to(root)}: {link} (no such anchor)")
    return broken


def main(argv: list[str]) -> int:
    root = Path(argv[1] if len(argv) > 1 else "docs/_build/html")
    if not (root / "index.html").is_file():
        print(f"{root} holds no built site (run make docs)", file=sys.stderr)
        return 1
    broken = broken_links(root)
    for line in broken:
        print(line)
    print(f"{len(broken)} broken internal link(s)", file=sys.stderr)
    return 1 if broken else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
