"""Docstring paragraphs that several public objects share, written once.

A docstring line that holds only ``{name}``, for a ``name`` of the
fragments given, is replaced by that fragment, indented as the line, so that
a numpydoc section shared by a family of functions (their common parameters,
a reference they all cite) has one source::

    @shared_doc(METRIC_DOCS)
    def brier_score(y_true, y_prob, *, labels=None):
        '''Multiclass Brier score.

        {score_parameters}
        '''

Any other line, braces included, is left as it is.
"""

from __future__ import annotations

import textwrap
from collections.abc import Callable, Mapping
from typing import TypeVar

__all__ = ["LABEL_KEY_DOC", "N_THREADS_DOC", "ON_DEVICE_DOC", "fill_doc", "shared_doc"]

#: The ``label_key`` parameter of every estimator that reads Hugging Face batches
#: (the calibrators in backbone mode and the fine-tuning estimators).
LABEL_KEY_DOC = """\
label_key : str, default="labels"
    The key of the labels when a Dataset or DataLoader yields Hugging Face
    style mappings (``{"input_ids", "attention_mask", "labels"}``,
    ``{"pixel_values", "labels"}``); the other entries go to the model.
    ``"label"`` suits a ``datasets`` column read with the default collation."""

#: The ``n_threads`` parameter of every estimator that trains a network.
N_THREADS_DOC = """\
n_threads : int or None, default=None
    Number of CPU threads torch uses while the estimator fits and
    predicts (as scikit-learn's ``n_jobs``); the caller's setting is
    restored afterwards. ``None``: one thread for a small network
    (parameters times rows per batch below
    :data:`reliacal.training.SMALL_WORK`), whose matrix products more
    threads barely speed up and threads waiting on a busy machine slow
    down many times over; torch's own setting for a larger one."""

#: The line of every function and estimator that computes on a tensor's own device.
ON_DEVICE_DOC = """\
A torch tensor is computed on its device, without a copy to the host (a CPU
tensor as the numpy array that shares its memory)."""

_Documented = TypeVar("_Documented")


def fill_doc(docstring: str | None, fragments: Mapping[str, str]) -> str | None:
    """``docstring`` with each ``{name}`` line replaced by ``fragments[name]``.

    >>> print(fill_doc("Notes\\n    -----\\n    {note}\\n", {"note": "One.\\nTwo."}))
    Notes
        -----
        One.
        Two.
    <BLANKLINE>
    """
    if docstring is None:  # python -OO strips docstrings
        return None
    lines = docstring.split("\n")
    for index, line in enumerate(lines):
        name = line.strip()
        if name.startswith("{") and name.endswith("}") and name[1:-1] in fragments:
            indent = line[: len(line) - len(line.lstrip())]
            lines[index] = textwrap.indent(fragments[name[1:-1]], indent)
    return "\n".join(lines)


def shared_doc(fragments: Mapping[str, str]) -> Callable[[_Documented], _Documented]:
    """Decorator: :func:`fill_doc` on the decorated object's docstring."""

    def decorate(documented: _Documented) -> _Documented:
        documented.__doc__ = fill_doc(documented.__doc__, fragments)
        return documented

    return decorate
