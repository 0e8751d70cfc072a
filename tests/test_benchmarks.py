"""benchmarks/: a README a reader scans in a minute, and scripts that share helpers, not each other.

The README is one table (script, command, results file, headline); the details
live in the results files and in results/decisions.md. Every results file is
linked from it, and every link resolves. A benchmark script imports the
``_``-prefixed helper modules beside it, never another script, so that a
script can change without breaking the ones that reuse its pieces.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

BENCHMARKS = Path(__file__).resolve().parents[1] / "benchmarks"
README = BENCHMARKS / "README.md"
RESULTS = BENCHMARKS / "results"
MAX_WORDS = 1000
LINK = re.compile(r"\[[^\]]*\]\(([^)\s]+)\)")


def _links(markdown: str) -> list[str]:
    return LINK.findall(markdown)


def _local_links(path: Path) -> list[tuple[str, Path, str]]:
    """``(link, target, anchor)`` of every link in ``path`` that is not a web address."""
    found = []
    for link in _links(path.read_text()):
        if "://" in link or link.startswith("mailto:"):
            continue
        target, _, anchor = link.partition("#")
        found.append((link, (path.parent / target).resolve() if target else path, anchor))
    return found


def _anchor(heading: str) -> str:
    """GitHub's anchor of a Markdown heading: lower case, punctuation dropped, spaces -> -."""
    return re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")


def _anchors(path: Path) -> set[str]:
    return {
        _anchor(line.lstrip("#")) for line in path.read_text().splitlines() if line.startswith("#")
    }


def test_readme_is_short():
    words = len(README.read_text().split())
    assert words < MAX_WORDS, f"benchmarks/README.md has {words} words"


def test_readme_is_one_table_of_script_command_results_headline():
    rows = [line for line in README.read_text().splitlines() if line.startswith("| `")]
    assert rows
    header = next(line for line in README.read_text().splitlines() if line.startswith("| "))
    assert [cell.strip() for cell in header.strip("|").split("|")] == [
        "script",
        "command",
        "results",
        "headline",
    ]
    scripts = {path.name for path in BENCHMARKS.glob("[!_]*.py")}
    listed = {re.match(r"\| `([\w.]+)`", row).group(1) for row in rows}
    assert listed == scripts


def test_every_results_file_is_linked_from_the_readme():
    linked = {target for _, target, _ in _local_links(README)}
    for path in RESULTS.rglob("*"):
        if path.is_file() and not any(part.startswith(".") for part in path.parts):
            covered = path in linked or any(parent in linked for parent in path.parents)
            assert covered, f"{path.relative_to(BENCHMARKS)} is not linked from the README"


@pytest.mark.parametrize("markdown", [README, RESULTS / "decisions.md"], ids=lambda path: path.name)
def test_every_link_resolves(markdown):
    links = _local_links(markdown)
    assert links
    for link, target, anchor in links:
        assert target.exists(), f"{markdown.name}: {link}"
        if anchor:
            assert anchor in _anchors(target), f"{markdown.name}: {link}"


def _sibling_imports(path: Path, siblings: set[str]) -> set[str]:
    """The modules of benchmarks/ that ``path`` imports (function-level imports included)."""
    imported = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names = [node.module]
        else:
            continue
        imported |= {name.split(".")[0] for name in names} & siblings
    return imported


def test_no_benchmark_script_imports_another():
    modules = {path.stem: path for path in BENCHMARKS.glob("*.py")}
    scripts = {name for name in modules if not name.startswith("_")}
    assert {"text_wordnet", "posthoc_quality", "calattn_digits"} <= scripts
    offending = {
        name: sorted(_sibling_imports(path, scripts))
        for name, path in modules.items()
        if _sibling_imports(path, scripts)
    }
    assert not offending, f"move the shared pieces to a _helper module: {offending}"


def test_the_import_check_sees_an_import_of_a_script(tmp_path):
    script = tmp_path / "tune_something.py"
    script.write_text(
        "import _common\nfrom text_wordnet import Budget\n\n"
        "def main():\n    import posthoc_quality as quality\n"
    )
    siblings = {"text_wordnet", "posthoc_quality", "tune_something"}
    assert _sibling_imports(script, siblings) == {"text_wordnet", "posthoc_quality"}
