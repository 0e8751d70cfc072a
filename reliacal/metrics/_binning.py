"""Binning of confidences: the single source of every binned metric and of the plots.

Conventions (also stated in :func:`binned_statistics`, the public entry point):

* uniform bins have edges exactly ``b / n_bins`` (division, not ``linspace``), are
  right-closed ``(lo, hi]`` and the first bin also holds 0, so a confidence on an
  edge lies in the lower bin and a confidence of 1.0 in the last one; comparisons
  are exact (float32 input is compared in float64, so ``float32(0.3)``, which is
  above 0.3, lies in the upper bin);
* quantile bins split the sorted confidences into ``n_bins`` groups whose sizes
  differ by at most one, as ``numpy.array_split``; tied confidences are ordered by
  outcome (negatives first), which makes the result independent of sample order;
* empty bins have count 0 and NaN means, and contribute nothing to any metric.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from reliacal._docstrings import shared_doc
from reliacal._validation import check_n_bins, check_option
from reliacal.metrics._docs import METRIC_DOCS
from reliacal.metrics._edges import uniform_bin_index, uniform_edges
from reliacal.metrics._predictions import checked_scores
from reliacal.metrics._sorted import score_key, scores_of_key
from reliacal.metrics.modes import SCORE_MODES, check_mode

STRATEGIES = ("uniform", "quantile")
# Samples binned at once by uniform_sums.
_CHUNK_SAMPLES = 1 << 16


def array_split_starts(n_samples: int, n_bins: int) -> np.ndarray:
    """Start of each of ``n_bins`` groups (plus the end), as ``numpy.array_split``."""
    base, extra = divmod(n_samples, n_bins)
    sizes = np.full(n_bins, base, dtype=np.int64)
    sizes[:extra] += 1
    return np.concatenate([[0], np.cumsum(sizes)])


def _quantile_order(confidence: np.ndarray, outcome: np.ndarray, starts: np.ndarray):
    """Confidences and outcomes rearranged so that group ``j`` is ``[starts[j], starts[j+1])``.

    The keys of :func:`sort_scores` are partitioned at the group starts rather than
    sorted: sums within a group do not depend on order.
    """
    key = score_key(confidence, outcome)
    cuts = starts[1:-1]
    cuts = cuts[cuts < key.shape[0]]
    if cuts.size:
        key = np.partition(key, cuts)
    return scores_of_key(key)


@dataclass(frozen=True, eq=False)
class BinnedStatistics:
    """Per-bin summary of confidences and outcomes: what a reliability diagram shows.

    Attributes
    ----------
    edges : ndarray of shape (n_bins + 1,)
        Bin edges. Uniform: ``b / n_bins``. Quantile: 0, the midpoints between the
        largest confidence of each bin and the smallest of the next (1.0 after the
        last non-empty bin), and 1.
    counts : ndarray of int64, shape (n_bins,)
        Number of samples in each bin.
    mean_confidence : ndarray of shape (n_bins,)
        Mean confidence in each bin (NaN where empty).
    accuracy : ndarray of shape (n_bins,)
        Observed frequency of the outcome in each bin (top-label: accuracy;
        positive mode: fraction of positives); NaN where empty.
    n_samples : int
        Total number of samples.

    Examples
    --------
    >>> stats = binned_statistics([0, 1, 0], [[0.8, 0.2], [0.3, 0.7], [0.4, 0.6]], n_bins=2)
    >>> stats.counts, stats.accuracy
    (array([0, 3]), array([       nan, 0.66666667]))
    >>> round(float(stats.gaps[1]), 4)  # accuracy - confidence: over-confident if < 0
    -0.0333
    """

    edges: np.ndarray
    counts: np.ndarray
    mean_confidence: np.ndarray
    accuracy: np.ndarray
    n_samples: int

    @property
    def n_bins(self) -> int:
        """Number of bins."""
        return self.counts.shape[0]

    @property
    def gaps(self) -> np.ndarray:
        """``accuracy - mean_confidence`` per bin (NaN where empty)."""
        return self.accuracy - self.mean_confidence


def _readonly(array: np.ndarray) -> np.ndarray:
    array.flags.writeable = False
    return array


def statistics_from_sums(
    edges: np.ndarray, counts: np.ndarray, sum_confidence: np.ndarray, sum_outcome: np.ndarray
) -> BinnedStatistics:
    """Build :class:`BinnedStatistics` from per-bin counts and sums."""
    counts = np.asarray(counts, dtype=np.int64)
    with np.errstate(invalid="ignore", divide="ignore"):
        mean_confidence = np.where(counts > 0, sum_confidence / counts, np.nan)
        accuracy = np.where(counts > 0, sum_outcome / counts, np.nan)
    return BinnedStatistics(
        edges=_readonly(np.asarray(edges, dtype=np.float64)),
        counts=_readonly(counts),
        mean_confidence=_readonly(mean_confidence),
        accuracy=_readonly(accuracy),
        n_samples=int(counts.sum()),
    )


def uniform_sums(confidence, outcome, n_bins: int):
    """Uniform-bin ``(edges, counts, sum_confidence, sum_outcome)`` of float64 scores.

    Samples are binned in chunks: the bin index costs several 8-byte temporaries
    per sample, which would otherwise exceed the size of the scores themselves.
    """
    chunk = max(_CHUNK_SAMPLES, n_bins)  # each bincount allocates n_bins entries
    counts = np.zeros(n_bins, dtype=np.int64)
    sum_confidence = np.zeros(n_bins)
    sum_outcome = np.zeros(n_bins)
    for start in range(0, confidence.shape[0], chunk):
        part = confidence[start : start + chunk]
        index = uniform_bin_index(part, n_bins)
        counts += np.bincount(index, minlength=n_bins)
        sum_confidence += np.bincount(index, weights=part, minlength=n_bins)
        sum_outcome += np.bincount(index, weights=outcome[start : start + chunk], minlength=n_bins)
    return uniform_edges(n_bins), counts, sum_confidence, sum_outcome


def uniform_sums_of_sorted(confidence, outcome, n_bins: int):
    """:func:`uniform_sums` of scores in :func:`sort_scores` order: a search per edge.

    Bin ``b`` holds ``(edges[b], edges[b + 1]]`` (the first also 0): the samples
    between the counts of values at most each edge, which ``searchsorted`` finds.
    """
    edges = uniform_edges(n_bins)
    bounds = np.concatenate(
        [[0], np.searchsorted(confidence, edges[1:-1], side="right"), [confidence.shape[0]]]
    )
    counts = np.diff(bounds)
    filled = counts > 0
    sum_confidence = np.zeros(n_bins)
    sum_outcome = np.zeros(n_bins)
    # Consecutive non-empty bins: each sum runs to the next one's start.
    starts = bounds[:-1][filled]
    sum_confidence[filled] = np.add.reduceat(confidence, starts)
    sum_outcome[filled] = np.add.reduceat(outcome, starts, dtype=np.float64)
    return edges, counts, sum_confidence, sum_outcome


def quantile_sums(confidence, outcome, n_bins: int, *, is_sorted: bool = False):
    """Quantile-bin ``(edges, counts, sum_confidence, sum_outcome)`` of float64 scores.

    ``is_sorted``: the scores are already in :func:`sort_scores` order (no partition).
    """
    n_samples = confidence.shape[0]
    starts = array_split_starts(n_samples, n_bins)
    if is_sorted:
        ordered_confidence, ordered_outcome = confidence, outcome
    else:
        ordered_confidence, ordered_outcome = _quantile_order(confidence, outcome, starts)
    counts = np.diff(starts)
    filled = int(np.count_nonzero(counts))  # array_split leaves the empty groups last
    first = starts[:filled]
    sum_confidence = np.zeros(n_bins)
    sum_outcome = np.zeros(n_bins)
    sum_confidence[:filled] = np.add.reduceat(ordered_confidence, first)
    sum_outcome[:filled] = np.add.reduceat(ordered_outcome, first, dtype=np.float64)
    edges = np.ones(n_bins + 1)
    edges[0] = 0.0
    if filled > 1 and is_sorted:
        edges[1:filled] = (ordered_confidence[first[1:] - 1] + ordered_confidence[first[1:]]) / 2
    elif filled > 1:
        lowest = np.minimum.reduceat(ordered_confidence, first)
        highest = np.maximum.reduceat(ordered_confidence, first)
        edges[1:filled] = (highest[:-1] + lowest[1:]) / 2
    return edges, counts, sum_confidence, sum_outcome


def bin_scores(
    confidence: np.ndarray, outcome: np.ndarray, n_bins: int, strategy: str, *, is_sorted=False
) -> BinnedStatistics:
    """Bin float64 confidences in [0, 1] with boolean outcomes (validated input).

    ``is_sorted``: the scores are in :func:`sort_scores` order, which quantile bins
    then split without partitioning them again.
    """
    if strategy == "uniform":
        return statistics_from_sums(*uniform_sums(confidence, outcome, n_bins))
    return statistics_from_sums(*quantile_sums(confidence, outcome, n_bins, is_sorted=is_sorted))


@shared_doc(METRIC_DOCS)
def binned_statistics(
    y_true, y_prob, *, n_bins: int = 15, strategy: str = "uniform", mode="top-label", labels=None
) -> BinnedStatistics:
    """Per-bin counts, mean confidences and observed frequencies.

    The single source of the binned calibration errors and the reliability
    diagrams. With ``mode="top-label"`` the binned variable is the confidence
    ``max_k p_k`` and the outcome is ``[argmax_k p_k == y]``; with
    ``mode="positive"`` (1-D input or two columns) they are ``p(y = 1)`` and
    ``[y = 1]``, as in scikit-learn's ``calibration_curve``.

    Uniform bins have edges ``b / n_bins`` and are right-closed, ``(lo, hi]``, the
    first also holding 0: a confidence on an edge belongs to the lower bin and 1.0 to
    the last. Quantile bins split the sorted confidences into ``n_bins`` groups whose
    sizes differ by at most one (``numpy.array_split``), ties ordered by outcome.

    Parameters
    ----------
    y_true : array-like of shape (n,)
        True labels (column indices, or classes listed in ``labels``).
    y_prob : array-like of shape (n, K) or (n,)
        Predicted probabilities; 1-D input is the positive-class probability of a
        binary problem (top-label mode then uses ``[1 - p, p]``).
    {binning}
    {mode_labels}

    Returns
    -------
    BinnedStatistics
        Edges, counts, mean confidence and accuracy per bin, and ``n_samples``.

    References
    ----------
    C. Guo, G. Pleiss, Y. Sun, K. Q. Weinberger. On Calibration of Modern Neural
    Networks. ICML 2017.

    Examples
    --------
    >>> stats = binned_statistics([1, 0], [0.95, 1.0], n_bins=10, mode="positive")
    >>> stats.counts
    array([0, 0, 0, 0, 0, 0, 0, 0, 0, 2])
    >>> float(stats.mean_confidence[-1]), float(stats.accuracy[-1])
    (0.975, 0.5)
    """
    n_bins = check_n_bins(n_bins)
    check_option(strategy, "strategy", STRATEGIES)
    check_mode(mode, SCORE_MODES)
    confidence, outcome = checked_scores(y_true, y_prob, mode, labels=labels)
    return bin_scores(confidence, outcome, n_bins, strategy)
