"""The one vocabulary of calibration modes: which probability is judged against what.

Every function that takes ``mode=`` accepts a subset of these names, listed here
so that the metrics, the streaming state and the plots cannot drift apart. Public,
so that the layers above (the reliability diagrams) validate ``mode=`` with the same
names and messages as the metrics.
"""

from __future__ import annotations

from reliacal._validation import check_option

__all__ = [
    "CLASS",
    "CLASSWISE",
    "ERROR_MODES",
    "MODES",
    "PLOT_MODES",
    "POSITIVE",
    "SCORE_MODES",
    "TOP_LABEL",
    "check_mode",
]

TOP_LABEL = "top-label"
POSITIVE = "positive"
CLASSWISE = "classwise"
CLASS = "class"

MODES = {
    TOP_LABEL: "the confidence max_k p_k against [argmax_k p_k == y]",
    POSITIVE: "p(y = 1) against [y = 1], for binary problems",
    CLASSWISE: "every class's p_k against [y == k], combined over the classes",
    CLASS: "one class's p_k against [y == k] (reliability diagrams, with class_=)",
}

# One score per sample: binned_statistics, the smooth ECE and its curve.
SCORE_MODES = (TOP_LABEL, POSITIVE)
# The binned calibration errors also combine every class's binary problem.
ERROR_MODES = (TOP_LABEL, POSITIVE, CLASSWISE)
# A reliability diagram shows one binary problem at a time.
PLOT_MODES = (TOP_LABEL, POSITIVE, CLASS)


def check_mode(mode, allowed: tuple[str, ...]) -> str:
    """Validate ``mode`` against the modes a function accepts (a ``ValueError`` if not).

    Examples
    --------
    >>> check_mode("positive", SCORE_MODES)
    'positive'
    >>> check_mode("classwise", SCORE_MODES)
    Traceback (most recent call last):
    ...
    ValueError: mode must be one of 'top-label', 'positive'; got 'classwise'
    """
    return check_option(mode, "mode", allowed)
