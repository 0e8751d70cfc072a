"""Calibration metrics: pure functions on ``(y_true, y_prob)``, scorers, report, streaming.

Every function takes labels and probabilities (never logits: see :func:`softmax`),
validates them (``ValueError`` naming the problem) and returns a Python float.
Conventions (15 bins; uniform edges ``b / n_bins``; right-closed bins ``(lo, hi]``
with 0 in the first; quantile bins as ``array_split`` of the sorted confidences;
top-label unless ``mode="positive"``) are stated in :func:`binned_statistics`.

Scorers for scikit-learn model selection: ``ece_scorer``, ``nll_scorer`` and
``brier_scorer`` are negated (greater is better) and call ``predict_proba``;
:func:`make_calibration_scorer` builds others.

The metric functions and :func:`calibration_report` also take Dask arrays and
DataFrames (per-partition :class:`CalibrationState` objects, merged; Dask is
imported only then). ``reliacal.metrics.torchmetrics.BinnedCalibrationError`` is
a torchmetrics ``Metric`` of per-bin sums (needs torchmetrics).
"""

from reliacal.metrics._binning import BinnedStatistics, binned_statistics
from reliacal.metrics._calibration_error import (
    classwise_calibration_error,
    debiased_calibration_error,
    expected_calibration_error,
    maximum_calibration_error,
)
from reliacal.metrics._calibration_tests import (
    SpiegelhalterResult,
    ks_calibration_error,
    spiegelhalter_test,
)
from reliacal.metrics._compare import compare
from reliacal.metrics._decomposition import (
    CorpReliability,
    ScoreDecomposition,
    corp_reliability,
    score_decomposition,
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
from reliacal.metrics._sweep import (
    monotonic_sweep_calibration_error,
    overconfidence_error,
    signed_calibration_error,
    underconfidence_error,
)

__all__ = [
    "BinnedStatistics",
    "CalibrationScorer",
    "CalibrationState",
    "CorpReliability",
    "ScoreDecomposition",
    "SmoothReliabilityCurve",
    "SpiegelhalterResult",
    "accuracy",
    "binned_statistics",
    "brier_score",
    "brier_scorer",
    "calibration_report",
    "classwise_calibration_error",
    "compare",
    "corp_reliability",
    "debiased_calibration_error",
    "ece_scorer",
    "expected_calibration_error",
    "ks_calibration_error",
    "make_calibration_scorer",
    "maximum_calibration_error",
    "monotonic_sweep_calibration_error",
    "negative_log_likelihood",
    "nll_scorer",
    "overconfidence_error",
    "score_decomposition",
    "signed_calibration_error",
    "smooth_calibration_error",
    "smooth_reliability_curve",
    "softmax",
    "spiegelhalter_test",
    "underconfidence_error",
]
