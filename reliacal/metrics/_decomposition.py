"""CORP reliability (isotonic recalibration) and the exact score decomposition.

Dimitriadis, Gneiting and Jordan (PNAS 2021) replace the binned reliability
diagram by the isotonic regression of the outcome on the forecast, computed with
the pool-adjacent-violators (PAV) algorithm: no bins to choose, and the fit is the
best non-decreasing recalibration under every proper scoring rule at once. Scoring
the forecast, its recalibration and the climatological base rate gives the
miscalibration, discrimination and uncertainty components whose combination
``MCB - DSC + UNC`` is the mean score itself.
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np

from reliacal._docstrings import shared_doc
from reliacal._validation import check_option
from reliacal.metrics._docs import METRIC_DOCS
from reliacal.metrics._predictions import checked_scores
from reliacal.metrics._sorted import run_ends, sort_scores

SCORES = ("brier", "log")


class CorpReliability(NamedTuple):
    """The CORP reliability curve: the isotonic fit at each distinct forecast.

    Attributes
    ----------
    confidence : ndarray of shape (m,)
        The distinct forecast values, increasing.
    calibrated : ndarray of shape (m,)
        The recalibrated probability (PAV fit of the outcome) at each of them:
        non-decreasing, piecewise constant.
    counts : ndarray of int64, shape (m,)
        How many samples have each forecast value.
    """

    confidence: np.ndarray
    calibrated: np.ndarray
    counts: np.ndarray


class ScoreDecomposition(NamedTuple):
    """``score = miscalibration - discrimination + uncertainty`` (CORP).

    Attributes
    ----------
    score : float
        Mean score of the forecasts (lower is better).
    miscalibration : float
        MCB: score of the forecasts minus score of their isotonic recalibration (>= 0).
    discrimination : float
        DSC: score of the base rate minus score of the recalibration (>= 0).
    uncertainty : float
        UNC: score of the base rate (the climatological forecast).
    """

    score: float
    miscalibration: float
    discrimination: float
    uncertainty: float


def pool_adjacent_violators(values: np.ndarray, weights: np.ndarray) -> np.ndarray:
    """Weighted least-squares non-decreasing fit of ``values`` (in their order).

    A stack of blocks (weight, weighted sum): each new value starts a block and
    merges backwards while its mean is below the previous block's mean. Every
    value enters and leaves the stack once, so the cost is O(m).

    Parameters
    ----------
    values : ndarray of shape (m,)
        Values to fit, ordered by the covariate.
    weights : ndarray of shape (m,)
        Positive weights.

    Returns
    -------
    ndarray of shape (m,)
        The fitted non-decreasing values (each block's weighted mean).

    Examples
    --------
    >>> pool_adjacent_violators(np.array([0.0, 1.0, 0.0, 1.0]), np.ones(4))
    array([0. , 0.5, 0.5, 1. ])
    """
    block_weight: list[float] = []
    block_sum: list[float] = []
    block_size: list[int] = []
    for value, weight in zip(values.tolist(), weights.tolist(), strict=True):
        total_weight, total_sum, size = weight, value * weight, 1
        # Cross-multiplied comparison of means: no division inside the loop.
        while block_weight and block_sum[-1] * total_weight >= total_sum * block_weight[-1]:
            total_weight += block_weight.pop()
            total_sum += block_sum.pop()
            size += block_size.pop()
        block_weight.append(total_weight)
        block_sum.append(total_sum)
        block_size.append(size)
    means = np.asarray(block_sum) / np.asarray(block_weight)
    return np.repeat(means, block_size)


def _pooled_by_forecast(sorted_confidence: np.ndarray, sorted_outcome: np.ndarray):
    """Distinct forecasts, their counts and outcome means, from scores sorted by forecast."""
    # Equal forecasts are contiguous once sorted: each run is one group.
    ends = np.flatnonzero(run_ends(sorted_confidence))
    starts = np.concatenate([[0], ends[:-1] + 1])
    counts = ends - starts + 1
    frequency = np.add.reduceat(sorted_outcome, starts, dtype=np.float64) / counts
    return sorted_confidence[ends], counts, frequency


@shared_doc(METRIC_DOCS)
def corp_reliability(y_true, y_prob, *, mode: str = "top-label", labels=None) -> CorpReliability:
    r"""CORP reliability curve: isotonic regression of the outcome on the forecast.

    With forecasts :math:`x_i` (top-label confidence, or :math:`p(y = 1)` with
    ``mode="positive"``) and outcomes :math:`o_i \in \{0, 1\}` (correctness, or
    :math:`[y = 1]`), the recalibrated forecast is

    .. math:: \hat x = \arg\min_{g \text{ non-decreasing}} \sum_i (o_i - g(x_i))^2 ,

    computed by pool-adjacent-violators; equal forecasts share one value (their
    outcomes are pooled first, as scikit-learn's ``IsotonicRegression`` does). The
    curve is "Consistent, Optimally binned, Reproducible and PAV-based": no bins to
    choose. A calibrated forecaster's curve lies on the diagonal. Pure numpy; the
    PAV loop runs once over the distinct forecast values.

    Parameters
    ----------
    y_true : array-like of shape (n,)
        True labels.
    y_prob : array-like of shape (n, K) or (n,)
        Predicted probabilities; 1-D input is the positive-class probability.
    {mode_labels}

    Returns
    -------
    CorpReliability
        ``(confidence, calibrated, counts)`` at each distinct forecast value.

    {corp_references}

    Examples
    --------
    >>> curve = corp_reliability([0, 1, 0, 1], [0.1, 0.4, 0.6, 0.9], mode="positive")
    >>> curve.confidence
    array([0.1, 0.4, 0.6, 0.9])
    >>> curve.calibrated
    array([0. , 0.5, 0.5, 1. ])
    """
    confidence, outcome = checked_scores(y_true, y_prob, mode, labels=labels)
    distinct, counts, frequency = _pooled_by_forecast(*sort_scores(confidence, outcome))
    calibrated = pool_adjacent_violators(frequency, counts.astype(np.float64))
    return CorpReliability(distinct, calibrated, counts.astype(np.int64))


def _mean_score(forecast: np.ndarray, outcome: np.ndarray, score: str) -> float:
    """Mean Brier or log score of binary forecasts (``0 log 0 = 0``)."""
    if score == "brier":
        return float(np.mean((forecast - outcome) ** 2))
    probability_of_outcome = np.where(outcome, forecast, 1.0 - forecast)
    with np.errstate(divide="ignore"):
        return float(np.mean(-np.log(probability_of_outcome)))


@shared_doc(METRIC_DOCS)
def score_decomposition(
    y_true, y_prob, *, score: str = "brier", mode: str = "top-label", labels=None
) -> ScoreDecomposition:
    r"""CORP decomposition of the Brier or log score into MCB, DSC and UNC.

    With forecasts :math:`x_i`, outcomes :math:`o_i`, the isotonic recalibration
    :math:`\hat x_i` (:func:`corp_reliability`) and the base rate
    :math:`r = \bar o`, and :math:`\bar S(f) = \frac{1}{n}\sum_i S(f_i, o_i)`:

    .. math::
        \mathrm{MCB} = \bar S(x) - \bar S(\hat x), \quad
        \mathrm{DSC} = \bar S(r) - \bar S(\hat x), \quad
        \mathrm{UNC} = \bar S(r), \quad
        \bar S(x) = \mathrm{MCB} - \mathrm{DSC} + \mathrm{UNC}.

    The PAV fit is calibrated and optimal among non-decreasing recalibrations for
    every proper score, so MCB and DSC are non-negative. For the Brier score
    :math:`S(f, o) = (f - o)^2`, :math:`\mathrm{DSC} = \overline{(\hat x - r)^2}`
    (each PAV block's mean outcome is its fitted value) and
    :math:`\mathrm{UNC} = r(1 - r)`.
    The log score is :math:`S(f, o) = -\log f` if :math:`o = 1` else
    :math:`-\log(1 - f)` (natural log); it is infinite for a forecast of 0 or 1
    that is wrong. Scores are those of the binary problem (forecast, outcome): with
    ``mode="positive"`` on 1-D input they equal :func:`brier_score` and, when no
    forecast is 0 or 1, :func:`negative_log_likelihood`.

    {prediction_inputs}
    score : {"brier", "log"}, default="brier"
        The proper scoring rule.
    {mode_labels}

    Returns
    -------
    ScoreDecomposition
        ``(score, miscalibration, discrimination, uncertainty)``.

    {corp_references}

    Examples
    --------
    >>> parts = score_decomposition([0, 1, 0, 1], [0.1, 0.4, 0.6, 0.9], mode="positive")
    >>> [round(value, 4) for value in parts]
    [0.185, 0.06, 0.125, 0.25]
    """
    check_option(score, "score", SCORES)
    confidence, outcome = checked_scores(y_true, y_prob, mode, labels=labels)
    return decomposition_of_sorted(*sort_scores(confidence, outcome), score)


def decomposition_of_sorted(
    sorted_confidence: np.ndarray, sorted_outcome: np.ndarray, score: str = "brier"
) -> ScoreDecomposition:
    """:func:`score_decomposition` of scores sorted by :func:`sort_scores`."""
    _, counts, frequency = _pooled_by_forecast(sorted_confidence, sorted_outcome)
    fitted = pool_adjacent_violators(frequency, counts.astype(np.float64))
    recalibrated = np.repeat(fitted, counts)
    base_rate = np.full_like(sorted_confidence, float(np.mean(sorted_outcome)))
    forecast_score = _mean_score(sorted_confidence, sorted_outcome, score)
    recalibrated_score = _mean_score(recalibrated, sorted_outcome, score)
    uncertainty = _mean_score(base_rate, sorted_outcome, score)
    return ScoreDecomposition(
        score=forecast_score,
        miscalibration=forecast_score - recalibrated_score,
        discrimination=uncertainty - recalibrated_score,
        uncertainty=uncertainty,
    )
