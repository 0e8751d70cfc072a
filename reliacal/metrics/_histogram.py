"""A fine histogram of top-label scores: what a stream keeps instead of every confidence.

The quantile bins, the KS error and the monotonic sweep read the confidences in
sorted order, and the smooth ECE spreads them onto grids. A
:class:`ScoreHistogram` keeps, in constant memory, what these need from one pass:

* per bucket ``floor(c * 2**BUCKET_BITS)`` of the confidence ``c`` (exact, since the
  scaling is a power of two, and monotone in ``c``; 1.0 has the last bucket to
  itself): the count, the positives, the sums of ``c`` over all and over positive
  samples, and the smallest and largest ``c``;
* the spreads of the samples onto the grids of the smooth ECE's bandwidth search
  (:func:`~reliacal.metrics._smooth.bisection_grid_sizes`), which add up across
  batches, so that the smooth ECE needs no more than this.

A bucket whose smallest and largest confidence are equal holds one value, whose
order is known (ties by outcome, negatives first); other buckets are refined by
later passes where a metric needs their order (:mod:`reliacal.metrics._cells`).
"""

from __future__ import annotations

import numpy as np

from reliacal.metrics._smooth import bisection_grid_sizes, spread_scores

__all__ = ["BUCKET_BITS", "N_BUCKETS", "ScoreHistogram", "bucket_of"]

BUCKET_BITS = 20
N_BUCKETS = (1 << BUCKET_BITS) + 1
# Samples buffered before they are binned: each bincount allocates N_BUCKETS entries.
_FLUSH_SAMPLES = 1 << 20


def bucket_of(confidence: np.ndarray) -> np.ndarray:
    """The bucket of each float64 confidence in [0, 1]: ``floor(c * 2**BUCKET_BITS)``."""
    return (confidence * float(1 << BUCKET_BITS)).astype(np.intp)


def _spread_grids(sizes) -> dict[int, np.ndarray]:
    return {size: np.zeros((2, size)) for size in sizes}


class ScoreHistogram:
    """Mergeable bucket sums of ``(confidence, outcome)`` pairs and their smoothing grids.

    Parameters
    ----------
    small_grids : bool, default=False
        Also spread the samples onto the grids of bandwidths below 0.01, which the
        smooth ECE's search reaches on well-calibrated predictions only (a later
        pass adds them when it does).
    """

    def __init__(self, *, small_grids: bool = False):
        self.n_samples = 0
        self.counts = np.zeros(N_BUCKETS, dtype=np.int64)
        self.positives = np.zeros(N_BUCKETS, dtype=np.int64)
        self.sum_confidence = np.zeros(N_BUCKETS)
        self.sum_positive_confidence = np.zeros(N_BUCKETS)
        self.low = np.full(N_BUCKETS, np.inf)
        self.high = np.full(N_BUCKETS, -np.inf)
        wide, small = bisection_grid_sizes()
        self.grids = _spread_grids((wide, *small) if small_grids else (wide,))
        self._pending: list[tuple[np.ndarray, np.ndarray]] = []
        self._pending_samples = 0

    def add(self, confidence: np.ndarray, outcome: np.ndarray) -> None:
        """Add validated float64 confidences (no ``-0.0``) and boolean outcomes."""
        if confidence.shape[0] == 0:
            return
        self.n_samples += confidence.shape[0]
        residual = confidence - outcome
        for values in self.grids.values():
            spread_scores(confidence, residual, values)
        self._pending.append((confidence, outcome))
        self._pending_samples += confidence.shape[0]
        if self._pending_samples >= _FLUSH_SAMPLES:
            self.flush()

    def flush(self) -> None:
        """Bin the buffered samples."""
        if not self._pending:
            return
        confidence = np.concatenate([part for part, _ in self._pending])
        outcome = np.concatenate([part for _, part in self._pending])
        self._pending, self._pending_samples = [], 0
        bucket = bucket_of(confidence)
        self.counts += np.bincount(bucket, minlength=N_BUCKETS)
        self.positives += np.bincount(bucket, weights=outcome, minlength=N_BUCKETS).astype(np.int64)
        self.sum_confidence += np.bincount(bucket, weights=confidence, minlength=N_BUCKETS)
        positive_confidence = np.where(outcome, confidence, 0.0)
        self.sum_positive_confidence += np.bincount(
            bucket, weights=positive_confidence, minlength=N_BUCKETS
        )
        np.minimum.at(self.low, bucket, confidence)
        np.maximum.at(self.high, bucket, confidence)

    def add_grids(self, grids: dict[int, np.ndarray]) -> None:
        """Add the spreads of the same samples onto more grids (from a later pass)."""
        for size, values in grids.items():
            if size not in self.grids:
                self.grids[size] = values.copy()

    def merge(self, other: ScoreHistogram) -> ScoreHistogram:
        """Add ``other``'s samples (in place); return ``self``."""
        self.flush()
        other.flush()
        if set(other.grids) != set(self.grids):
            # A grid that one side lacks cannot be completed: keep the common ones.
            common = set(self.grids) & set(other.grids)
            self.grids = {size: self.grids[size] for size in common}
        for size, values in self.grids.items():
            values += other.grids[size]
        self.n_samples += other.n_samples
        self.counts += other.counts
        self.positives += other.positives
        self.sum_confidence += other.sum_confidence
        self.sum_positive_confidence += other.sum_positive_confidence
        np.minimum(self.low, other.low, out=self.low)
        np.maximum(self.high, other.high, out=self.high)
        return self

    def __getstate__(self):
        # Travels (to a Dask client) as its non-empty buckets only.
        self.flush()
        filled = np.flatnonzero(self.counts)
        state = {
            "n_samples": self.n_samples,
            "grids": self.grids,
            "filled": filled,
        }
        for name in ("counts", "positives", "sum_confidence", "sum_positive_confidence"):
            state[name] = getattr(self, name)[filled]
        state["low"], state["high"] = self.low[filled], self.high[filled]
        return state

    def __setstate__(self, state):
        filled = state["filled"]
        self.n_samples = state["n_samples"]
        self.grids = state["grids"]
        self._pending, self._pending_samples = [], 0
        for name, dtype in (
            ("counts", np.int64),
            ("positives", np.int64),
            ("sum_confidence", np.float64),
            ("sum_positive_confidence", np.float64),
        ):
            array = np.zeros(N_BUCKETS, dtype=dtype)
            array[filled] = state[name]
            setattr(self, name, array)
        self.low = np.full(N_BUCKETS, np.inf)
        self.high = np.full(N_BUCKETS, -np.inf)
        self.low[filled], self.high[filled] = state["low"], state["high"]
