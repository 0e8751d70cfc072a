"""Shared docstring sections: filled in place, and none left unfilled in the public API."""

import importlib
import inspect
import pkgutil
import re
from pathlib import Path

import pytest

import reliacal
import reliacal.finetune.losses as losses
import reliacal.metrics as metrics
from reliacal._docstrings import fill_doc, shared_doc

MARKER_LINE = re.compile(r"^\s*\{\w+\}\s*$", flags=re.MULTILINE)


def test_marker_line_takes_the_fragment_at_its_indentation():
    doc = "Summary.\n\n    {section}\n\n    Examples\n"
    filled = fill_doc(doc, {"section": "Returns\n-------\nfloat\n    A value."})
    assert filled == (
        "Summary.\n\n    Returns\n    -------\n    float\n        A value.\n\n    Examples\n"
    )


def test_other_lines_and_unknown_names_are_left_alone():
    doc = '    {other}\n    mode : {"a", "b"}\n    see {section} inline\n'
    assert fill_doc(doc, {"section": "x"}) == doc
    assert fill_doc(None, {"section": "x"}) is None


def test_decorator_fills_the_docstring_and_returns_the_object():
    def f():
        """Head.

        {part}
        """

    assert shared_doc({"part": "Body."})(f) is f
    assert "        Body." in f.__doc__


@pytest.mark.parametrize("module", [metrics, losses], ids=lambda module: module.__name__)
def test_public_functions_have_no_unfilled_marker(module):
    names = getattr(module, "__all__", None) or [
        name for name in dir(module) if not name.startswith("_")
    ]
    for name in names:
        value = getattr(module, name)
        if inspect.isfunction(value) and value.__doc__:
            assert not MARKER_LINE.search(value.__doc__), name


def test_metric_family_documents_its_parameters():
    for function in (metrics.overconfidence_error, metrics.brier_score, losses.focal_loss):
        doc = function.__doc__
        for name in inspect.signature(function).parameters:
            assert re.search(rf"^    {name} : ", doc, flags=re.MULTILINE), (function, name)


# Reference, not a lab notebook ----------------------------------------------------------
#
# A public docstring says what a parameter means, its default and why; the measurements
# behind a default live in benchmarks/results/ (decisions.md has one section per default),
# linked from the docstring. These patterns find what belongs there instead.

ROOT = Path(__file__).resolve().parents[1]
NOTEBOOK_PATTERNS = {
    "issue number": re.compile(r"\bissues?\s*#?\d+|(?<![\w&#/])#\d+\b", re.IGNORECASE),
    "percentage": re.compile(r"(?<![\w.])\d+(?:[.,]\d+)*\s*%"),
    "speed ratio": re.compile(
        r"\b\d+(?:\.\d+)?\s*(?:x|×|times)\s+(?:faster|slower|quicker)\b", re.IGNORECASE
    ),
    "timing": re.compile(
        r"(?<![\w.^/-])\d+(?:\.\d+)?\s?(?:s|ms|µs|us|secs?|seconds?|mins?|minutes?|h|hours?)"
        r"\b(?![\^_(])"
    ),
    "session history": re.compile(r"\bload average\b|\bcommit [0-9a-f]{7,40}\b", re.IGNORECASE),
}
# Numbers that are part of a definition, not a measurement: (object, text).
NOTEBOOK_ALLOWED = {
    # The level of the interval the demo's significance table reports.
    ("reliacal.demo._run.significance_table", "95%"),
    # The interval level at which a bootstrap needs 2 / alpha replicates.
    ("reliacal.metrics._compare.compare", "95%"),
    # A doctest's printed label for a toy example, not a measurement.
    ("reliacal.plot.ReliabilityDisplay.plot", "13.33%"),
}


def notebook_entries(text: str) -> list[tuple[str, str]]:
    """``(kind, match)`` for every measured number, issue number or session note in ``text``."""
    return [
        (kind, match.group(0))
        for kind, pattern in NOTEBOOK_PATTERNS.items()
        for match in pattern.finditer(text)
    ]


def _public_docstrings() -> dict[str, str]:
    """Qualified name -> docstring of every module of reliacal and every public class,
    function, method and property defined in it (as filled in at import)."""
    docs = {}
    for info in pkgutil.walk_packages(reliacal.__path__, "reliacal."):
        module = importlib.import_module(info.name)
        if module.__doc__:
            docs[info.name] = module.__doc__
        for name, value in vars(module).items():
            if name.startswith("_") or getattr(value, "__module__", None) != info.name:
                continue
            if not (inspect.isclass(value) or inspect.isfunction(value)):
                continue
            if value.__doc__:
                docs[f"{info.name}.{name}"] = value.__doc__
            if inspect.isclass(value):
                for member, attribute in vars(value).items():
                    if member.startswith("_") and member != "__init__":
                        continue
                    function = attribute.fget if isinstance(attribute, property) else attribute
                    function = getattr(function, "__func__", function)
                    if inspect.isfunction(function) and function.__doc__:
                        docs[f"{info.name}.{name}.{member}"] = function.__doc__
    return docs


PUBLIC_DOCSTRINGS = _public_docstrings()


@pytest.mark.parametrize(
    ("text", "kind"),
    [
        ('``benchmarks/results/text_wordnet.md``, "Issue 15\'s goals"', "issue number"),
        ("as asked in #15", "issue number"),
        ("test accuracy 37.5% anchored, 22.0% unanchored", "percentage"),
        ("4.3x faster than torchmetrics", "speed ratio"),
        ("two times slower", None),
        ("0.53 s at 50,000 x 1,000", "timing"),
        ("in 123 s on 2 CPU cores", "timing"),
        ("about 10 ms, more than a fit", "timing"),
        ("measured under a load average of 8-15", "session history"),
        ("``log(s / sigma) + sigma^2 / (2 s^2) - 1/2``", None),
        ("(``y`` is then -1s)", None),
        ("``f'{value:.1%}'`` formats a share", None),
        ("the 16x16 images of 4x4 patches, ``n_bins=15``", None),
    ],
)
def test_the_notebook_patterns_catch_measurements_and_spare_formulas(text, kind):
    found = {entry_kind for entry_kind, _ in notebook_entries(text)}
    assert found == ({kind} if kind else set())


def test_public_docstrings_hold_no_measurements_or_issue_numbers():
    assert len(PUBLIC_DOCSTRINGS) > 300  # the walk reached the whole package
    offending = [
        f"{name}: {kind} {match!r}"
        for name, doc in PUBLIC_DOCSTRINGS.items()
        for kind, match in notebook_entries(doc)
        if (name, match) not in NOTEBOOK_ALLOWED
    ]
    assert not offending, "move these to benchmarks/results/ and link them:\n" + "\n".join(
        offending
    )


def test_every_allowed_number_is_still_there():
    for name, text in NOTEBOOK_ALLOWED:
        assert text in PUBLIC_DOCSTRINGS[name], (name, text)


def _anchor(heading: str) -> str:
    """GitHub's anchor of a Markdown heading: lower case, punctuation dropped, spaces -> -."""
    return re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")


def test_docstring_links_to_the_results_resolve():
    decisions = (ROOT / "benchmarks" / "results" / "decisions.md").read_text()
    anchors = {_anchor(line.lstrip("#")) for line in decisions.splitlines() if line.startswith("#")}
    links = 0
    for name, doc in PUBLIC_DOCSTRINGS.items():
        for path, anchor in re.findall(r"``(benchmarks/[\w./-]+)(?:#([\w-]+))?``", doc):
            links += 1
            assert (ROOT / path).exists(), (name, path)
            if anchor:
                assert path == "benchmarks/results/decisions.md", (name, path)
                assert anchor in anchors, (name, anchor)
    assert links >= 20  # the estimators link their defaults' reasons
