"""Calibration metrics: pure functions on ``(y_true, y_prob)``, scorers, report, streaming.

Every function takes labels and probabilities (never logits: see :func:`softmax`),
validates them (``ValueError`` naming the problem) and returns a Python float.
Conventions (15 bins; uniform edges ``b / n_bins``; right-closed bins ``(lo, hi]``
with 0 in the first; quantile bins as ``array_split`` of the sorted confidences;
top-label unless ``mode="positive"``) are stated in :func:`binned_statistics`.

Scorers for scikit-learn model selection: ``ece_scorer``, ``nll_scorer`` and
``brier_scorer`` are negated (greater is better) and call ``predict_proba``;
:func:`make_calibration_scorer` builds others.
"""

from reliacal.metrics._binning import BinnedStatistics, binned_statistics
from reliacal.metrics._calibration_error import (
    classwise_calibration_error,
    debiased_calibration_error,
    expected_calibration_error,
    maximum_calibration_error,
)
from reliacal.metrics._report import calibration_report
from reliacal.metrics._scorers import (
    CalibrationScorer,
    brier_scorer,
    ece_scorer,
    make_calibration_scorer,
    nll_scorer,
)
from reliacal.metrics._scores import accuracy, brier_score, negative_log_likelihood, softmax
from reliacal.metrics._smooth import (
    SmoothReliabilityCurve,
    smooth_calibration_error,
    smooth_reliability_curve,
)
from reliacal.metrics._streaming import CalibrationState

__all__ = [
    "BinnedStatistics",
    "CalibrationScorer",
    "CalibrationState",
    "SmoothReliabilityCurve",
    "accuracy",
    "binned_statistics",
    "brier_score",
    "brier_scorer",
    "calibration_report",
    "classwise_calibration_error",
    "debiased_calibration_error",
    "ece_scorer",
    "expected_calibration_error",
    "make_calibration_scorer",
    "maximum_calibration_error",
    "negative_log_likelihood",
    "nll_scorer",
    "smooth_calibration_error",
    "smooth_reliability_curve",
    "softmax",
]
