"""Calibration metrics: pure functions on ``(y_true, y_prob)``, scorers, report, streaming.

Every function takes labels and probabilities (never logits: see :func:`softmax`),
validates them (``ValueError`` naming the problem) and returns a Python float.
Conventions (15 bins; uniform edges ``b / n_bins``; right-closed bins ``(lo, hi]``
with 0 in the first; quantile bins as ``array_split`` of the sorted confidences;
top-label unless ``mode="positive"``) are stated in :func:`binned_statistics`.

``y_prob`` may be a pandas DataFrame: its columns are matched to the classes by
name, never by position. Columns named by class numbers (``p0, p1, ...``,
``p_1``, ``class3_prob``: a shared prefix and suffix around the number) are put in
the order of their numbers, whatever the frame's order (``p0, p1, p10, p2`` too);
other names are the classes themselves, so ``y_true`` holds them. With
``labels=``, the names must be those classes (or their numbers); anything else is
refused. Pass ``frame.to_numpy()`` to use the columns' positions instead.

Torch tensors are computed on their device (a GPU's, or a CPU tensor as the numpy
array that shares its memory), without a copy to the host (except MPS tensors, which
are copied to it: the device code computes in float64, which MPS lacks), by
:func:`expected_calibration_error` (all strategies, norms and modes),
:func:`maximum_calibration_error`, :func:`classwise_calibration_error`,
:func:`debiased_calibration_error`,
:func:`negative_log_likelihood`, :func:`brier_score` and :func:`accuracy`; the
other functions, :func:`binned_statistics` and :func:`calibration_report` accept
tensors and read them as numpy arrays (a copy to the host).

Scorers for scikit-learn model selection: ``ece_scorer``, ``nll_scorer`` and
``brier_scorer`` are negated (greater is better) and call ``predict_proba``;
:func:`make_calibration_scorer` builds others.

The metric functions and :func:`calibration_report` also take Dask arrays and
DataFrames (per-partition :class:`CalibrationState` objects, merged; Dask is
imported only then). :func:`calibration_states` and :func:`report_from_states`
build the report from streaming states, block by block; a state with
``histogram=True`` gives the sorted and smoothed metrics too, in constant memory,
after a further pass over the same batches (:meth:`CalibrationState.refine_with`).
The mode names live in :mod:`reliacal.metrics.modes`. ``reliacal.metrics.torchmetrics.BinnedCalibrationError``
is a torchmetrics ``Metric`` of per-bin sums (needs torchmetrics).
"""

from reliacal.metrics._binning import BinnedStatistics, binned_statistics
from reliacal.metrics._calibration_tests import SpiegelhalterResult
from reliacal.metrics._compare import compare
from reliacal.metrics._decomposition import (
    CorpReliability,
    ScoreDecomposition,
    corp_reliability,
    score_decomposition,
)
from reliacal.metrics._public import (
    accuracy,
    brier_score,
    classwise_calibration_error,
    debiased_calibration_error,
    expected_calibration_error,
    ks_calibration_error,
    maximum_calibration_error,
    monotonic_sweep_calibration_error,
    negative_log_likelihood,
    overconfidence_error,
    signed_calibration_error,
    smooth_calibration_error,
    spiegelhalter_test,
    underconfidence_error,
)
from reliacal.metrics._report import (
    calibration_report,
    calibration_states,
    per_model,
    report_columns,
    report_from_states,
)
from reliacal.metrics._scorers import (
    CalibrationScorer,
    brier_scorer,
    ece_scorer,
    make_calibration_scorer,
    nll_scorer,
)
from reliacal.metrics._scores import softmax
from reliacal.metrics._smooth import SmoothReliabilityCurve, smooth_reliability_curve
from reliacal.metrics._smooth_band import SmoothReliabilityBand, smooth_reliability_band
from reliacal.metrics._streaming import CalibrationState

__all__ = [
    "BinnedStatistics",
    "CalibrationScorer",
    "CalibrationState",
    "CorpReliability",
    "ScoreDecomposition",
    "SmoothReliabilityBand",
    "SmoothReliabilityCurve",
    "SpiegelhalterResult",
    "accuracy",
    "binned_statistics",
    "brier_score",
    "brier_scorer",
    "calibration_report",
    "calibration_states",
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
    "per_model",
    "report_columns",
    "report_from_states",
    "score_decomposition",
    "signed_calibration_error",
    "smooth_calibration_error",
    "smooth_reliability_band",
    "smooth_reliability_curve",
    "softmax",
    "spiegelhalter_test",
    "underconfidence_error",
]
