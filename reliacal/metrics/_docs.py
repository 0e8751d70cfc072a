"""The numpydoc paragraphs that the metric functions share, written once.

A metric's docstring names a fragment on a line of its own (``{name}``) and
the function is decorated with ``@shared_doc(METRIC_DOCS)`` (see
:mod:`reliacal._docstrings`). Whole sections are fragments, headers included,
because the functions of one family take the same parameters in the same
order; a function with parameters of its own starts its section with
``{prediction_inputs}`` and lists the rest itself.
"""

from __future__ import annotations

from reliacal._docstrings import ON_DEVICE_DOC

__all__ = ["METRIC_DOCS"]

_PREDICTION_INPUTS = """\
Parameters
----------
y_true : array-like of shape (n,)
    True labels.
y_prob : array-like of shape (n, K) or (n,), or DataFrame
    Predicted probabilities (a DataFrame's columns are matched to the classes
    by name, see :mod:`reliacal.metrics`)."""

_BINNING = """
n_bins : int, default=15
    Number of bins.
strategy : {"uniform", "quantile"}, default="uniform"
    Equal-width or equal-mass bins."""

_MODE = """
mode : {"top-label", "positive"}, default="top-label"
    Which probability is calibrated."""

_MODE_CLASSWISE = """
mode : {"top-label", "positive", "classwise"}, default="top-label"
    Which probabilities are calibrated."""

_LABELS = """
labels : array-like of shape (K,), optional
    The class of each column of ``y_prob``."""

METRIC_DOCS = {
    # The Parameters section header, y_true and y_prob: the rest follows.
    "prediction_inputs": _PREDICTION_INPUTS,
    # f(y_true, y_prob, *, labels)
    "score_parameters": _PREDICTION_INPUTS + _LABELS,
    # f(y_true, y_prob, *, mode, labels)
    "calibration_parameters": _PREDICTION_INPUTS + _MODE + _LABELS,
    # f(y_true, y_prob, *, n_bins, strategy, mode, labels)
    "binned_parameters": _PREDICTION_INPUTS + _BINNING + _MODE + _LABELS,
    # the same with mode="classwise" allowed
    "binned_classwise_parameters": _PREDICTION_INPUTS + _BINNING + _MODE_CLASSWISE + _LABELS,
    "binning": _BINNING.lstrip("\n"),
    "on_device": ON_DEVICE_DOC,
    "mode": _MODE.lstrip("\n"),
    "labels": _LABELS.lstrip("\n"),
    "mode_classwise": _MODE_CLASSWISE.lstrip("\n"),
    "mode_labels": (_MODE + _LABELS).lstrip("\n"),
    "smooth_ece_references": """\
References
----------
J. Blasiok, P. Nakkiran. Smooth ECE: Principled Reliability Diagrams via Kernel
Smoothing. ICLR 2024 (arXiv:2309.12236).""",
    "corp_references": """\
References
----------
T. Dimitriadis, T. Gneiting, A. I. Jordan. Stable reliability diagrams for
probabilistic classifiers. PNAS 118(8), 2021.""",
}
