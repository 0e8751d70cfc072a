"""ECE with a data-chosen bin count (monotonic sweep) and signed over/under-confidence."""

from __future__ import annotations

import numpy as np

from reliacal._docstrings import shared_doc
from reliacal._validation import check_n_bins, check_option
from reliacal.metrics._binning import STRATEGIES, array_split_starts, bin_scores
from reliacal.metrics._docs import METRIC_DOCS
from reliacal.metrics._predictions import checked_scores
from reliacal.metrics._sorted import sort_scores

SWEEP_NORMS = ("l1", "l2")
# Bin counts whose accuracies come from counting each group's positives; larger
# counts read one cumulative sum.
_SLICED_COUNTS = 8


def _group_means(cumulative: np.ndarray, n_samples: int, n_bins: int) -> np.ndarray:
    """Means of the ``numpy.array_split`` groups, from a cumulative sum with a leading 0."""
    base, extra = divmod(n_samples, n_bins)
    sizes = np.full(n_bins, base, dtype=np.int64)
    sizes[:extra] += 1
    bounds = np.concatenate([[0], np.cumsum(sizes)])
    return (cumulative[bounds[1:]] - cumulative[bounds[:-1]]) / sizes


def _group_means_of_slices(sorted_outcome: np.ndarray, n_bins: int) -> np.ndarray:
    """:func:`_group_means` of boolean outcomes, counting each group's positives.

    The counts are the exact integers that the differences of the cumulative sum
    give, so the means are the same floats.
    """
    starts = array_split_starts(sorted_outcome.shape[0], n_bins)
    positives = [
        np.count_nonzero(sorted_outcome[start:stop])
        for start, stop in zip(starts[:-1], starts[1:], strict=True)
    ]
    return np.array(positives, dtype=np.float64) / np.diff(starts)


def sweep_n_bins(sorted_outcome: np.ndarray) -> int:
    """The monotonic-sweep bin count of outcomes sorted by :func:`sort_scores`.

    In that order (by confidence, ties by outcome, negatives first) ``b``
    equal-mass bins are ``array_split`` groups, so each bin's accuracy is a
    difference of one cumulative sum.
    """
    n_samples = sorted_outcome.shape[0]
    boolean = sorted_outcome.dtype == np.bool_
    if boolean:
        # Non-decreasing booleans: no positive, or positives from the first one on.
        positives = int(np.count_nonzero(sorted_outcome))
        non_decreasing = positives in (0, n_samples - int(np.argmax(sorted_outcome)))
    else:
        non_decreasing = bool(np.all(sorted_outcome[1:] >= sorted_outcome[:-1]))
    if non_decreasing:
        # Contiguous groups of a non-decreasing sequence always have non-decreasing means.
        return n_samples
    cumulative = None
    n_bins = 1
    while n_bins < n_samples:
        trial = n_bins + 1
        if boolean and trial <= _SLICED_COUNTS:
            # Most sweeps stop after a few counts: count those groups' positives
            # rather than build a cumulative sum of every sample.
            accuracy = _group_means_of_slices(sorted_outcome, trial)
        else:
            if cumulative is None:
                # Written after a leading 0 in place: no second array of n floats.
                cumulative = np.empty(n_samples + 1)
                cumulative[0] = 0.0
                np.cumsum(sorted_outcome, dtype=np.float64, out=cumulative[1:])
            accuracy = _group_means(cumulative, n_samples, trial)
        if np.any(np.diff(accuracy) < 0):
            break
        n_bins += 1
    return n_bins


def sweep_of_sorted(sorted_confidence, sorted_outcome, norm: str = "l1") -> tuple[float, int]:
    """``(error, b*)`` of the monotonic sweep on scores sorted by :func:`sort_scores`."""
    n_bins = sweep_n_bins(sorted_outcome)
    stats = bin_scores(sorted_confidence, sorted_outcome, n_bins, "quantile", is_sorted=True)
    weights = stats.counts / stats.n_samples
    filled = stats.counts > 0
    gaps = np.abs(stats.gaps[filled])
    if norm == "l1":
        return float(np.sum(weights[filled] * gaps)), n_bins
    return float(np.sqrt(np.sum(weights[filled] * gaps**2))), n_bins


@shared_doc(METRIC_DOCS)
def monotonic_sweep_calibration_error(
    y_true,
    y_prob,
    *,
    norm: str = "l1",
    mode: str = "top-label",
    labels=None,
    return_n_bins: bool = False,
):
    r"""ECE with equal-mass bins, their number chosen by the monotonic sweep.

    Roelofs et al. (2022) pick the bin count from the data: the largest :math:`b`
    such that for every :math:`b' \le b` the accuracies of :math:`b'` equal-mass
    bins are monotone (non-decreasing in confidence),

    .. math:: b^* = \max\{b \le n : \forall b' \le b,\;
              \bar o^{(b')}_1 \le \dots \le \bar o^{(b')}_{b'}\},

    i.e. the sweep :math:`b = 1, 2, \dots` stops before the first count whose
    accuracies decrease somewhere. The result is
    :func:`expected_calibration_error` with ``strategy="quantile"`` and
    ``n_bins=b*`` (same bins: ``array_split`` of the confidences sorted with ties
    ordered by outcome). Each count costs O(b) from one cumulative sum, so the
    sweep costs O(n log n + b*^2).

    {prediction_inputs}
    norm : {"l1", "l2"}, default="l1"
        ECE (``l1``) or RMS calibration error (``l2``) at the chosen bins.
    {mode_labels}
    return_n_bins : bool, default=False
        Also return the chosen bin count.

    Returns
    -------
    float, or (float, int) with ``return_n_bins=True``
        The calibration error (and :math:`b^*`).

    References
    ----------
    R. Roelofs, N. Cain, J. Shlens, M. C. Mozer. Mitigating Bias in Calibration
    Error Estimation. AISTATS 2022.

    Examples
    --------
    >>> p = [0.1, 0.2, 0.3, 0.4, 0.6, 0.7]
    >>> y = [0, 1, 0, 1, 1, 1]
    >>> error, n_bins = monotonic_sweep_calibration_error(
    ...     y, p, mode="positive", return_n_bins=True
    ... )
    >>> round(error, 4), n_bins
    (0.2833, 4)
    """
    check_option(norm, "norm", SWEEP_NORMS)
    confidence, outcome = checked_scores(y_true, y_prob, mode, labels=labels)
    error, n_bins = sweep_of_sorted(*sort_scores(confidence, outcome), norm)
    return (error, n_bins) if return_n_bins else error


def _binned(y_true, y_prob, n_bins, strategy, mode, labels):
    n_bins = check_n_bins(n_bins)
    check_option(strategy, "strategy", STRATEGIES)
    confidence, outcome = checked_scores(y_true, y_prob, mode, labels=labels)
    return bin_scores(confidence, outcome, n_bins, strategy)


def signed_part(stats, sign: float) -> float:
    """Over- (sign 1) or under-confident (sign -1) part of the ECE of binned statistics."""
    filled = stats.counts > 0
    weights = stats.counts[filled] / stats.n_samples
    excess = -stats.gaps[filled]  # mean confidence minus accuracy
    return float(np.sum(weights * np.maximum(sign * excess, 0.0)))


@shared_doc(METRIC_DOCS)
def overconfidence_error(
    y_true, y_prob, *, n_bins: int = 15, strategy: str = "uniform", mode="top-label", labels=None
) -> float:
    r"""The part of the ECE from over-confident bins.

    .. math:: \mathrm{OE} = \sum_b \frac{n_b}{n} \max(\bar c_b - \bar o_b, 0)

    with the bins of :func:`expected_calibration_error`. Together with
    :func:`underconfidence_error`: ``OE + UE = ECE`` and
    ``OE - UE = signed_calibration_error`` (mean confidence minus accuracy).

    {binned_parameters}

    Returns
    -------
    float
        The over-confidence error, in [0, 1].

    Examples
    --------
    >>> y_prob = [[0.9, 0.1], [0.8, 0.2], [0.3, 0.7], [0.6, 0.4]]
    >>> round(overconfidence_error([0, 1, 1, 0], y_prob, n_bins=5), 4)
    0.125
    """
    return signed_part(_binned(y_true, y_prob, n_bins, strategy, mode, labels), 1.0)


@shared_doc(METRIC_DOCS)
def underconfidence_error(
    y_true, y_prob, *, n_bins: int = 15, strategy: str = "uniform", mode="top-label", labels=None
) -> float:
    r"""The part of the ECE from under-confident bins.

    .. math:: \mathrm{UE} = \sum_b \frac{n_b}{n} \max(\bar o_b - \bar c_b, 0)

    with the bins of :func:`expected_calibration_error`; see
    :func:`overconfidence_error`.

    {binned_parameters}

    Returns
    -------
    float
        The under-confidence error, in [0, 1].

    Examples
    --------
    Every prediction right, none more confident than 0.7: all of the ECE is
    under-confidence.

    >>> y_true = [0, 0, 1, 1]
    >>> y_prob = [[0.6, 0.4], [0.55, 0.45], [0.3, 0.7], [0.45, 0.55]]
    >>> round(underconfidence_error(y_true, y_prob, n_bins=5), 4)
    0.4
    >>> overconfidence_error(y_true, y_prob, n_bins=5)
    0.0
    """
    return signed_part(_binned(y_true, y_prob, n_bins, strategy, mode, labels), -1.0)


@shared_doc(METRIC_DOCS)
def signed_calibration_error(y_true, y_prob, *, mode: str = "top-label", labels=None) -> float:
    r"""Signed calibration error: mean confidence minus accuracy.

    .. math:: \mathrm{SCE} = \sum_b \frac{n_b}{n} (\bar c_b - \bar o_b)
              = \frac{1}{n}\sum_i (c_i - o_i)

    Positive means over-confident, negative under-confident. Weighting each bin's
    signed gap by its mass gives the same value for any binning, so no ``n_bins``:
    it equals ``overconfidence_error - underconfidence_error`` for every bin count,
    while over- and under-confident bins cancel here (their sum is the ECE).

    {calibration_parameters}

    Returns
    -------
    float
        Mean confidence minus accuracy, in [-1, 1].

    Examples
    --------
    >>> y_prob = [[0.9, 0.1], [0.8, 0.2], [0.3, 0.7], [0.6, 0.4]]
    >>> round(signed_calibration_error([0, 1, 1, 0], y_prob), 4)
    0.0
    """
    confidence, outcome = checked_scores(y_true, y_prob, mode, labels=labels)
    return float(np.mean(confidence) - np.mean(outcome))
