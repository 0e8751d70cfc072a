"""Shared docstring sections: filled in place, and none left unfilled in the public API."""

import inspect
import re

import pytest

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
