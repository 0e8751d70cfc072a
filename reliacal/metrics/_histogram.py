"""A fine histogram of top-label scores: what a stream keeps instead of every confidence.

The quantile bins, the KS error and the monotonic sweep read the confidences in
sorted order, and the smooth ECE spreads them onto grids. A
:class:`ScoreHistogram` keeps, in constant memory, what these need from one pass:
per bucket ``floor(c * 2**BUCKET_BITS)`` of the confidence ``c`` (exact, since the
scaling is a power of two, and monotone in ``c``; 1.0 has the last bucket to
itself), the count, the positives, the sums of ``c``, of ``c`` over the positive
samples and of ``c**2``, and the smallest and largest ``c``: about 56 MB.

A bucket whose smallest and largest confidence are equal holds one value, whose
order is known (ties by outcome, negatives first); other buckets are refined by
later passes where a metric needs their order (:mod:`reliacal.metrics._cells`).

The smooth ECE's bandwidth search spreads every sample linearly onto the two
points of a grid ``j / (m - 1)`` around it, for the grid sizes ``m`` of
:func:`~reliacal.metrics._smooth.bisection_grid_sizes`. The spread is linear in the
sample, so the samples of a bucket that lies between two grid points spread as
their sums do: ``sum (c (m - 1) - j) r = (m - 1) sum c r - j sum r`` for the
residuals ``r = c - o``. Only the few buckets that hold a grid point are spread
sample by sample, as the in-memory function spreads every sample; the grids equal
its grids up to floating-point rounding (of relative order ``m * 2**-52``, the
precision of a grid position). So the smooth ECE needs one pass.
"""

from __future__ import annotations

import functools

import numpy as np

from reliacal.metrics._smooth import bisection_grid_sizes, spread_scores
from reliacal.metrics._sorted import score_key, scores_of_key

__all__ = ["BUCKET_BITS", "N_BUCKETS", "ScoreHistogram", "bucket_of"]

BUCKET_BITS = 20
N_BUCKETS = (1 << BUCKET_BITS) + 1
# Samples buffered before they are binned: each flush reads and writes the tables of
# N_BUCKETS entries once, whatever the number of samples.
_FLUSH_SAMPLES = 1 << 21
# The tables: by (bucket, outcome) the samples and the sum of their confidences, and by
# bucket the sum of squares, the least and the largest confidence.
_TABLES = ("tallies", "confidence_sums", "sum_squares", "low", "high")


def bucket_of(confidence: np.ndarray) -> np.ndarray:
    """The bucket of each float64 confidence in [0, 1]: ``floor(c * 2**BUCKET_BITS)``."""
    return (confidence * float(1 << BUCKET_BITS)).astype(np.intp)


def _grid_cell(values: np.ndarray, size: int) -> np.ndarray:
    """The grid cell each value spreads from, computed as the in-memory spread does."""
    index = (values * (size - 1)).astype(np.intp)
    return np.clip(index, 0, size - 2, out=index)


def _bucket_bounds() -> tuple[np.ndarray, np.ndarray]:
    """The least and the largest float64 of each bucket."""
    low = np.arange(N_BUCKETS, dtype=np.float64) / float(1 << BUCKET_BITS)
    high = np.nextafter(np.append(low[1:], 1.0), 0.0)
    high[-1] = 1.0  # the last bucket holds 1.0 alone
    return low, high


@functools.cache
def grid_sizes() -> tuple[int, ...]:
    """Every grid the bandwidth search may spread onto (widest bandwidths' first)."""
    wide, small = bisection_grid_sizes()
    return (wide, *small)


@functools.cache
def straddling() -> np.ndarray:
    """``uint16`` per bucket: bit ``g`` set when the bucket holds a point of grid ``g``.

    The spread's cell is monotone in the confidence, so a bucket's samples share a
    cell exactly when its least and largest value do.
    """
    low, high = _bucket_bounds()
    table = np.zeros(N_BUCKETS, dtype=np.uint16)
    for bit, size in enumerate(grid_sizes()):
        table |= (_grid_cell(low, size) != _grid_cell(high, size)).astype(np.uint16) << bit
    table.flags.writeable = False
    return table


class ScoreHistogram:
    """Mergeable bucket sums of ``(confidence, outcome)`` pairs and their smoothing grids."""

    def __init__(self):
        self.n_samples = 0
        self.tallies = np.zeros((N_BUCKETS, 2), dtype=np.int64)
        self.confidence_sums = np.zeros((N_BUCKETS, 2))
        self.sum_squares = np.zeros(N_BUCKETS)
        self.low = np.full(N_BUCKETS, np.inf)
        self.high = np.full(N_BUCKETS, -np.inf)
        # The spreads of the samples in buckets that hold a grid point, per grid size.
        self.straddlers = {size: np.zeros((2, size)) for size in grid_sizes()}
        self._pending: list[tuple[np.ndarray, np.ndarray]] = []
        self._pending_samples = 0

    def add(self, confidence: np.ndarray, outcome: np.ndarray) -> None:
        """Add validated float64 confidences (no ``-0.0``) and boolean outcomes."""
        if confidence.shape[0] == 0:
            return
        self.n_samples += confidence.shape[0]
        self._pending.append((confidence, outcome))
        self._pending_samples += confidence.shape[0]
        if self._pending_samples >= _FLUSH_SAMPLES:
            self.flush()

    def flush(self) -> None:
        """Bin the buffered samples.

        They are sorted first (by confidence, then outcome), so that every table of
        2**20 entries is then read and written in order: updated at random, each
        would miss the cache on every sample. A bucket's samples form one run, whose
        ends are its least and largest values.
        """
        if not self._pending:
            return
        key = np.concatenate([score_key(*part) for part in self._pending])
        self._pending, self._pending_samples = [], 0
        key.sort()
        confidence, outcome = scores_of_key(key)
        bucket = bucket_of(confidence)
        cell = bucket * 2
        cell += outcome
        flat_tallies = self.tallies.reshape(-1)
        flat_tallies += np.bincount(cell, minlength=2 * N_BUCKETS)
        flat_sums = self.confidence_sums.reshape(-1)
        flat_sums += np.bincount(cell, weights=confidence, minlength=2 * N_BUCKETS)
        self.sum_squares += np.bincount(bucket, weights=confidence**2, minlength=N_BUCKETS)
        first = np.flatnonzero(np.concatenate([[True], bucket[1:] != bucket[:-1]]))
        last = np.append(first[1:], bucket.shape[0]) - 1
        filled = bucket[first]
        self.low[filled] = np.minimum(self.low[filled], confidence[first])
        self.high[filled] = np.maximum(self.high[filled], confidence[last])
        # Spread the samples of buckets that hold a grid point, sample by sample.
        marks = straddling()[filled]
        runs = np.flatnonzero(marks)
        if runs.shape[0]:
            lengths = last[runs] - first[runs] + 1
            # The samples of those runs: each run's first, then one after another.
            some = np.repeat(first[runs] - (np.cumsum(lengths) - lengths), lengths)
            some += np.arange(some.shape[0])
            marks = np.repeat(marks[runs], lengths)
            confidence, outcome = confidence[some], outcome[some]
            for bit, values in enumerate(self.straddlers.values()):
                chosen = np.flatnonzero(marks & (1 << bit))
                spread_scores(confidence[chosen], confidence[chosen] - outcome[chosen], values)

    # The per-bucket totals over both outcomes (a sum over the axis of length 2 would be
    # a slow per-row reduction: the two columns are added instead), then the outcome-1
    # parts.

    @property
    def counts(self) -> np.ndarray:
        """Samples per bucket."""
        return self.tallies[:, 0] + self.tallies[:, 1]

    @property
    def sum_confidence(self) -> np.ndarray:
        """Sum of the confidences per bucket."""
        return self.confidence_sums[:, 0] + self.confidence_sums[:, 1]

    @property
    def positives(self) -> np.ndarray:
        """Samples with outcome 1 per bucket."""
        return self.tallies[:, 1].copy()

    @property
    def sum_positive_confidence(self) -> np.ndarray:
        """Sum of the confidences of the samples with outcome 1, per bucket."""
        return self.confidence_sums[:, 1].copy()

    def grids(self) -> dict[int, np.ndarray]:
        """The smoothing grids of every size: bucket sums, and the straddlers' spreads."""
        self.flush()
        counts = self.counts
        filled = np.flatnonzero(counts)
        low = filled / float(1 << BUCKET_BITS)
        count = counts[filled].astype(np.float64)
        sum_confidence = self.sum_confidence[filled]
        residual = sum_confidence - self.tallies[filled, 1]
        # sum of c * (c - o) over the bucket
        confidence_residual = self.sum_squares[filled] - self.confidence_sums[filled, 1]
        marks = straddling()[filled]
        grids = {}
        for bit, size in enumerate(grid_sizes()):
            inside = (marks & (1 << bit)) == 0
            cell = _grid_cell(low[inside], size)
            # Each sample's share of the upper point is u = c (m - 1) - j: summed here.
            upper_residual = (size - 1) * confidence_residual[inside] - cell * residual[inside]
            upper_count = (size - 1) * sum_confidence[inside] - cell * count[inside]
            values = self.straddlers[size].copy()
            for row, total, upper in (
                (0, residual[inside], upper_residual),
                (1, count[inside], upper_count),
            ):
                values[row] += np.bincount(cell, weights=total - upper, minlength=size)
                values[row, 1:] += np.bincount(cell, weights=upper, minlength=size)[: size - 1]
            grids[size] = values
        return grids

    def merge(self, other: ScoreHistogram) -> ScoreHistogram:
        """Add ``other``'s samples (in place); return ``self``."""
        self.flush()
        other.flush()
        self.n_samples += other.n_samples
        self.tallies += other.tallies
        self.confidence_sums += other.confidence_sums
        self.sum_squares += other.sum_squares
        np.minimum(self.low, other.low, out=self.low)
        np.maximum(self.high, other.high, out=self.high)
        for size, values in self.straddlers.items():
            values += other.straddlers[size]
        return self

    def __getstate__(self):
        # Travels (to a Dask client) as its non-empty buckets only.
        self.flush()
        filled = np.flatnonzero(self.counts)
        state = {"n_samples": self.n_samples, "straddlers": self.straddlers, "filled": filled}
        for name in _TABLES:
            state[name] = getattr(self, name)[filled]
        return state

    def __setstate__(self, state):
        filled = state["filled"]
        self.n_samples = state["n_samples"]
        self.straddlers = state["straddlers"]
        self._pending, self._pending_samples = [], 0
        for name in _TABLES:
            part = state[name]
            empty = np.inf if name == "low" else -np.inf if name == "high" else 0
            array = np.full((N_BUCKETS, *part.shape[1:]), empty, dtype=part.dtype)
            array[filled] = part
            setattr(self, name, array)
