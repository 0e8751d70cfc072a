"""Binning-free calibration statistics: the KS calibration error and Spiegelhalter's Z."""

from __future__ import annotations

import math
from typing import NamedTuple

import numpy as np

from reliacal._docstrings import shared_doc
from reliacal.metrics._docs import METRIC_DOCS
from reliacal.metrics._predictions import checked_scores
from reliacal.metrics._sorted import run_ends, sort_scores

# Samples per chunk of spiegelhalter_sums.
_CHUNK = 1 << 16


class SpiegelhalterResult(NamedTuple):
    """Spiegelhalter's Z statistic and its two-sided p-value."""

    statistic: float
    pvalue: float


def _scores(y_true, y_prob, mode, labels):
    confidence, outcome = checked_scores(y_true, y_prob, mode, labels=labels)
    return confidence, outcome.astype(np.float64)


@shared_doc(METRIC_DOCS)
def ks_calibration_error(y_true, y_prob, *, mode: str = "top-label", labels=None) -> float:
    r"""Kolmogorov-Smirnov calibration error (Gupta et al., 2021).

    Sort the samples by forecast :math:`x_{(1)} \le \dots \le x_{(n)}` (top-label
    confidence, or :math:`p(y = 1)` with ``mode="positive"``) with outcomes
    :math:`o_{(i)}` (correctness, or :math:`[y = 1]`), and compare the cumulative
    sums:

    .. math:: \mathrm{KS} = \max_i \Big\lvert \frac{1}{n}\sum_{j \le i} x_{(j)}
              - \frac{1}{n}\sum_{j \le i} o_{(j)} \Big\rvert .

    A calibrated forecaster has matching cumulative curves. No bins. Equal
    forecasts form one step of the curves: the difference is taken only after the
    last of them, so the value does not depend on the order of ties (without ties
    this is exactly Gupta et al.'s definition).

    {calibration_parameters}

    Returns
    -------
    float
        The KS calibration error, in [0, 1].

    References
    ----------
    K. Gupta, A. Rahimi, T. Ajanthan, T. Mensink, C. Sminchisescu, R. Hartley.
    Calibration of Neural Networks using Splines. ICLR 2021.

    Examples
    --------
    >>> ks_calibration_error([0, 1, 1], [0.2, 0.6, 0.9], mode="positive")
    0.1
    """
    confidence, outcome = _scores(y_true, y_prob, mode, labels)
    return ks_of_sorted(*sort_scores(confidence, outcome))


def ks_of_sorted(sorted_confidence: np.ndarray, sorted_outcome: np.ndarray) -> float:
    """The KS calibration error of scores sorted by :func:`sort_scores`."""
    # One O(n) float array, reused in place: the report computes this on every sample.
    difference = np.subtract(sorted_confidence, sorted_outcome, dtype=np.float64)
    np.cumsum(difference, out=difference)
    np.abs(difference, out=difference)
    # Only the last sample of each run of equal forecasts ends a step of the curves.
    difference[~run_ends(sorted_confidence)] = 0.0
    return float(np.max(difference)) / sorted_confidence.shape[0]


def spiegelhalter_sums(confidence: np.ndarray, outcome: np.ndarray) -> tuple[float, float]:
    """``(sum_i (o_i - x_i)(1 - 2 x_i), sum_i (1 - 2 x_i)^2 x_i (1 - x_i))``: they add up.

    Summed in chunks, so that the temporaries stay small beside the report's O(n) arrays.
    """
    deviation = variance = 0.0
    size = min(_CHUNK, confidence.shape[0])
    slope, term = np.empty(size), np.empty(size)  # reused: no allocation per chunk
    for start in range(0, confidence.shape[0], _CHUNK):
        forecast = confidence[start : start + _CHUNK]
        n = forecast.shape[0]
        chunk_slope, chunk_term = slope[:n], term[:n]
        # 1 - 2 x, then (o - x)(1 - 2 x) and (1 - 2 x)^2 x (1 - x), each in this order.
        np.multiply(forecast, 2.0, out=chunk_slope)
        np.subtract(1.0, chunk_slope, out=chunk_slope)
        np.subtract(outcome[start : start + _CHUNK], forecast, out=chunk_term, dtype=np.float64)
        chunk_term *= chunk_slope
        deviation += float(np.sum(chunk_term))
        np.square(chunk_slope, out=chunk_term)
        chunk_term *= forecast
        np.subtract(1.0, forecast, out=chunk_slope)
        chunk_term *= chunk_slope
        variance += float(np.sum(chunk_term))
    return deviation, variance


def _undefined_test() -> ValueError:
    return ValueError(
        "Spiegelhalter's test is undefined when every forecast is 0, 0.5 or 1 "
        "(its variance under calibration is 0)"
    )


def spiegelhalter_from_sums(deviation: float, variance: float) -> SpiegelhalterResult:
    """Spiegelhalter's Z and p-value from :func:`spiegelhalter_sums` (ValueError if undefined)."""
    if variance <= 0.0:
        raise _undefined_test()
    statistic = deviation / math.sqrt(variance)
    return SpiegelhalterResult(statistic, math.erfc(abs(statistic) / math.sqrt(2.0)))


def spiegelhalter_from_table(statistic: float, pvalue: float) -> SpiegelhalterResult:
    """The test from the metric table's values, where NaN marks an undefined test."""
    if math.isnan(statistic):
        raise _undefined_test()
    return SpiegelhalterResult(statistic, pvalue)


@shared_doc(METRIC_DOCS)
def spiegelhalter_test(
    y_true, y_prob, *, mode: str = "top-label", labels=None
) -> SpiegelhalterResult:
    r"""Spiegelhalter's Z test of calibration, with a two-sided p-value.

    With forecasts :math:`x_i` and outcomes :math:`o_i` (as in
    :func:`ks_calibration_error`), the Brier score's deviation from its
    expectation under calibration, standardised:

    .. math:: Z = \frac{\sum_i (o_i - x_i)(1 - 2 x_i)}
                       {\sqrt{\sum_i (1 - 2 x_i)^2 \, x_i (1 - x_i)}} ,

    which is asymptotically standard normal when the forecasts are calibrated
    (:math:`o_i \sim \mathrm{Bernoulli}(x_i)` independently). The p-value is
    :math:`2\,(1 - \Phi(\lvert Z \rvert))`, computed as
    :math:`\mathrm{erfc}(\lvert Z \rvert / \sqrt 2)`. A small p-value is evidence
    of miscalibration. Undefined (``ValueError``) when every forecast is 0, 0.5 or
    1: then the denominator is 0.

    {calibration_parameters}

    Returns
    -------
    SpiegelhalterResult
        ``(statistic, pvalue)``.

    References
    ----------
    D. J. Spiegelhalter. Probabilistic prediction in patient management and
    clinical trials. Statistics in Medicine 5(5), 1986.

    Examples
    --------
    >>> result = spiegelhalter_test([0, 1], [0.2, 0.7], mode="positive")
    >>> round(result.statistic, 4), round(result.pvalue, 4)
    (-0.7947, 0.4268)
    """
    confidence, outcome = _scores(y_true, y_prob, mode, labels)
    return spiegelhalter_from_sums(*spiegelhalter_sums(confidence, outcome))
