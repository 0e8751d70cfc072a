"""The metric table: one definition per named metric, used everywhere a name is.

Each :class:`Metric` says how to compute it from :class:`MetricSums`, which public
function computes it from predictions (for the scorers), whether it streams (it
needs bin sums only) and whether :func:`calibration_report` shows it. The report's
columns, the streaming state's metrics and the scorers' names all come from
:data:`METRICS`, in its order.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

from reliacal.metrics._calibration_error import (
    classwise_calibration_error,
    classwise_error,
    debiased_calibration_error,
    debiased_error_from_statistics,
    error_from_statistics,
    expected_calibration_error,
    maximum_calibration_error,
)
from reliacal.metrics._calibration_tests import ks_calibration_error, spiegelhalter_from_sums
from reliacal.metrics._decomposition import decomposition_of_sorted
from reliacal.metrics._scores import accuracy, brier_score, negative_log_likelihood
from reliacal.metrics._smooth import smooth_calibration_error
from reliacal.metrics._sums import MetricSums
from reliacal.metrics._sweep import (
    monotonic_sweep_calibration_error,
    overconfidence_error,
    signed_part,
    underconfidence_error,
)


@dataclass(frozen=True)
class Metric:
    """One named metric.

    Attributes
    ----------
    name : str
        The report column, streaming key and scorer name.
    description : str
        One line for the documentation (reStructuredText).
    compute : callable
        ``compute(sums: MetricSums) -> float``.
    function : callable or None
        The public function on ``(y_true, y_prob)`` that equals ``compute`` with
        its default arguments (scorers call it); None when there is none.
    needs_samples : bool
        Whether it needs every confidence (quantile bins, kernel smoothing): such
        a metric cannot stream from fixed-size bin sums.
    from_histogram : bool
        For a metric that needs samples: whether a fine histogram of them, refined by
        further passes over the data, gives it exactly (in constant memory).
    in_report : bool
        Whether :func:`calibration_report` has a column for it.
    greater_is_better : bool
        True for scores (accuracy), False for losses (scorers negate those).
    """

    name: str
    description: str
    compute: Callable[[MetricSums], float]
    function: Callable | None = None
    needs_samples: bool = False
    from_histogram: bool = True
    in_report: bool = True
    greater_is_better: bool = False

    @property
    def streamable(self) -> bool:
        """Whether it can be computed from bin sums that add up across batches."""
        return not self.needs_samples


def _accuracy(sums: MetricSums) -> float:
    return float(sums.sum_correct.sum() / sums.n_samples)


def _signed_part(sums: MetricSums, sign: float) -> float:
    """Over- (sign 1) or under-confident (sign -1) part of the uniform-bin ECE."""
    return signed_part(sums.uniform_statistics(), sign)


def _spiegelhalter(sums: MetricSums):
    try:
        return spiegelhalter_from_sums(sums.spiegelhalter_deviation, sums.spiegelhalter_variance)
    except ValueError:
        # Undefined (every confidence is 0.5 or 1): a table shows NaN instead of failing.
        return (math.nan, math.nan)


METRICS = (
    Metric(
        "accuracy",
        "fraction of correct arg-max predictions",
        _accuracy,
        accuracy,
        greater_is_better=True,
    ),
    Metric(
        "ece",
        "top-label ECE, uniform bins (:func:`expected_calibration_error`)",
        lambda sums: error_from_statistics(sums.uniform_statistics(), "l1"),
        expected_calibration_error,
    ),
    Metric(
        "adaptive_ece",
        "top-label ECE, equal-mass bins",
        lambda sums: error_from_statistics(sums.quantile_statistics(), "l1"),
        needs_samples=True,
    ),
    Metric(
        "classwise_ece",
        ":func:`classwise_calibration_error`, uniform bins",
        lambda sums: classwise_error(sums.classwise, "l1"),
        classwise_calibration_error,
    ),
    Metric(
        "mce",
        "maximum calibration error, uniform bins",
        lambda sums: error_from_statistics(sums.uniform_statistics(), "max"),
        maximum_calibration_error,
    ),
    Metric(
        "debiased_ece",
        ":func:`debiased_calibration_error`, equal-mass bins",
        lambda sums: debiased_error_from_statistics(sums.quantile_statistics()),
        debiased_calibration_error,
        needs_samples=True,
        in_report=False,
    ),
    Metric(
        "smooth_ece",
        ":func:`smooth_calibration_error`",
        MetricSums.smooth_ece,
        smooth_calibration_error,
        needs_samples=True,
    ),
    Metric(
        "nll",
        ":func:`negative_log_likelihood`",
        lambda sums: sums.sum_log_loss / sums.n_samples,
        negative_log_likelihood,
    ),
    Metric(
        "brier",
        ":func:`brier_score`",
        lambda sums: sums.sum_brier / sums.n_samples,
        brier_score,
    ),
    Metric(
        "signed_ece",
        "mean confidence minus accuracy (:func:`signed_calibration_error`): positive means "
        "over-confident, negative under-confident",
        lambda sums: sums.total_confidence / sums.n_samples - _accuracy(sums),
    ),
    Metric(
        "overconfidence_error",
        ":func:`overconfidence_error`: the ECE of the over-confident uniform bins",
        lambda sums: _signed_part(sums, 1.0),
        overconfidence_error,
        in_report=False,
    ),
    Metric(
        "underconfidence_error",
        ":func:`underconfidence_error`: the ECE of the under-confident uniform bins",
        lambda sums: _signed_part(sums, -1.0),
        underconfidence_error,
        in_report=False,
    ),
    Metric(
        "spiegelhalter_z",
        "Z statistic of :func:`spiegelhalter_test` (top-label; NaN where undefined)",
        lambda sums: _spiegelhalter(sums)[0],
    ),
    Metric(
        "spiegelhalter_p",
        "two-sided p-value of :func:`spiegelhalter_test` (top-label; NaN where undefined)",
        lambda sums: _spiegelhalter(sums)[1],
    ),
    # The sorted metrics read the confidences in increasing order: a step of the KS
    # curve, a PAV block or a sweep's bin can span any number of batches, so no
    # fixed-size per-batch summary determines them.
    Metric(
        "ks_error",
        ":func:`ks_calibration_error` (needs the sorted confidences)",
        MetricSums.ks_error,
        ks_calibration_error,
        needs_samples=True,
    ),
    Metric(
        "sweep_ece",
        ":func:`monotonic_sweep_calibration_error` (needs the sorted confidences)",
        MetricSums.sweep_ece,
        monotonic_sweep_calibration_error,
        needs_samples=True,
    ),
    Metric(
        "corp_miscalibration",
        "miscalibration (MCB) of the Brier :func:`score_decomposition` (needs the sorted "
        "confidences)",
        lambda sums: decomposition_of_sorted(*sums.sorted_samples()).miscalibration,
        needs_samples=True,
        from_histogram=False,
        # Its PAV pass holds Python floats per distinct confidence: several times the
        # input's memory on large reports, so only the state (keep_confidences) has it.
        in_report=False,
    ),
)

BY_NAME = {metric.name: metric for metric in METRICS}
REPORT_COLUMNS = tuple(metric.name for metric in METRICS if metric.in_report)
STREAMABLE = tuple(metric.name for metric in METRICS if metric.streamable)
NEED_SAMPLES = tuple(metric.name for metric in METRICS if metric.needs_samples)
FROM_HISTOGRAM = tuple(name for name in NEED_SAMPLES if BY_NAME[name].from_histogram)
FUNCTIONS = {metric.name: metric.function for metric in METRICS if metric.function is not None}
GREATER_IS_BETTER = frozenset(metric.function for metric in METRICS if metric.greater_is_better)


def compute(sums: MetricSums, names) -> dict[str, float]:
    """``{name: value}`` of the named metrics, in the order of ``names``."""
    return {name: BY_NAME[name].compute(sums) for name in names}


def describe(names, indent: int) -> str:
    """A reStructuredText definition list of the named metrics, for docstrings."""
    pad = " " * indent
    return "\n".join(f"{pad}``{name}``\n{pad}    {BY_NAME[name].description}" for name in names)
