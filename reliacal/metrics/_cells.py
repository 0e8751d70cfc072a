"""The sorted-order metrics of scores known as cells: value ranges with counts and sums.

A :class:`Cells` table splits the samples, sorted by confidence (ties by outcome,
negatives first, as :func:`~reliacal.metrics._sorted.sort_scores` sorts them), into
consecutive groups of whole value ranges: cell ``i`` holds every sample whose
confidence lies in ``[low[i], high[i]]``, and the ranges are disjoint and
increasing. Where ``low == high`` the cell holds one value, and its samples' order
is known (negatives, then positives); a cell of several values is known only by
its sums.

The quantile bins, the KS error and the monotonic sweep are computed from the
cells exactly when every cell whose inner order they depend on holds one value.
Each method returns the value, or raises :class:`Unresolved` with the cells to
refine, in order of need; a further pass over the data resolves them (collecting
their samples) or splits them into finer cells (:mod:`reliacal.metrics._refinement`).
The values equal the in-memory functions' up to floating-point summation order.
"""

from __future__ import annotations

import numpy as np

from reliacal.metrics._binning import BinnedStatistics, array_split_starts, statistics_from_sums
from reliacal.metrics._calibration_error import error_from_statistics

__all__ = ["Cells", "Unresolved"]

# The sweep stops looking for bin counts beyond the first undecided one once it has
# collected this many cells to refine: the next pass settles those first.
_SWEEP_NEEDS = 1 << 16
_SWEEP_LOOKAHEAD = 64


class Unresolved(ValueError):
    """A metric depends on the order inside cells of several values: ``cells`` to refine."""

    def __init__(self, cells: np.ndarray):
        super().__init__(
            "the value depends on the order of samples within cells of the fine "
            "histogram: refine them with another pass over the data"
        )
        self.cells = np.asarray(cells, dtype=np.intp)


class Cells:
    """Disjoint, increasing confidence ranges and their samples' counts and sums.

    Parameters
    ----------
    count, positives : ndarray of int64
        Samples in each cell, and how many of them have outcome 1.
    sum_confidence, sum_positive_confidence : ndarray of float64
        Sum of the confidences of the cell's samples, and of its positive ones.
    low, high : ndarray of float64
        Smallest and largest confidence in each cell.
    """

    def __init__(self, count, positives, sum_confidence, sum_positive_confidence, low, high):
        keep = np.asarray(count) > 0
        self.count = np.asarray(count, dtype=np.int64)[keep]
        self.positives = np.asarray(positives, dtype=np.int64)[keep]
        self.sum_confidence = np.asarray(sum_confidence, dtype=np.float64)[keep]
        self.sum_positive_confidence = np.asarray(sum_positive_confidence, np.float64)[keep]
        self.low = np.asarray(low, dtype=np.float64)[keep]
        self.high = np.asarray(high, dtype=np.float64)[keep]
        self.n_samples = int(self.count.sum())
        self.single = self.low == self.high
        self.negatives = self.count - self.positives
        # Per cell, with one entry past the last (the rank n).
        self._negatives = np.append(self.negatives, 0)
        self._positives = np.append(self.positives, 0)
        self._single = np.append(self.single, True)
        self._low = np.append(self.low, 0.0)
        # Ranks and prefix sums before each cell, with one entry past the last.
        self._ends = np.cumsum(self.count)
        self._starts = np.concatenate([[0], self._ends])
        self._positives_before = np.concatenate([[0], np.cumsum(self.positives)])
        self._confidence_before = np.concatenate([[0.0], np.cumsum(self.sum_confidence)])

    @classmethod
    def from_histogram(cls, histogram) -> Cells:
        """The non-empty buckets of a :class:`~reliacal.metrics._histogram.ScoreHistogram`."""
        histogram.flush()
        return cls(
            histogram.counts,
            histogram.positives,
            histogram.sum_confidence,
            histogram.sum_positive_confidence,
            histogram.low,
            histogram.high,
        )

    def __len__(self) -> int:
        return self.count.shape[0]

    # Ranks --------------------------------------------------------------------------

    def locate(self, ranks: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """``(cell, offset)`` of each rank in ``[0, n]``: the rank's sample is the
        ``offset``-th of ``cell`` (rank ``n`` is cell ``len(self)``, offset 0)."""
        ranks = np.asarray(ranks, dtype=np.int64)
        cell = np.searchsorted(self._ends, ranks, side="right")
        return cell, ranks - self._starts[cell]

    def _unresolved(self, cell: np.ndarray, offset: np.ndarray) -> np.ndarray:
        """The cells, among ``cell``, whose inner order a cut at ``offset`` depends on."""
        inside = offset > 0
        cell = cell[inside]
        return cell[~self.single[cell]]

    def _head_positives(self, cell, offset) -> np.ndarray:
        """Positives among the first ``offset`` samples of one-value (or cut-free) cells."""
        return np.maximum(offset - self._negatives[cell], 0)

    def prefix(self, ranks) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Sums of the confidences and outcomes of the ``r`` first samples, for each rank.

        Returns ``(confidence, positives, unresolved cells)``; the sums are exact
        where no cell is unresolved.
        """
        cell, offset = self.locate(ranks)
        confidence = self._confidence_before[cell] + offset * self._low[cell]
        positives = self._positives_before[cell] + self._head_positives(cell, offset)
        return confidence, positives, self._unresolved(cell, offset)

    def positives_bounds(self, ranks) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Least and most positives among the ``r`` first samples, and the cells that decide."""
        cell, offset = self.locate(ranks)
        before = self._positives_before[cell]
        low = before + self._head_positives(cell, offset)
        high = np.where(self._single[cell], low, before + np.minimum(self._positives[cell], offset))
        return low, high, self._unresolved(cell, offset)

    # Quantile bins --------------------------------------------------------------------

    def quantile_statistics(self, n_bins: int) -> BinnedStatistics:
        """Equal-mass bins as :func:`~reliacal.metrics._binning.quantile_sums` makes them."""
        n_samples = self.n_samples
        starts = array_split_starts(n_samples, n_bins)
        confidence, positives, unresolved = self.prefix(starts)
        if unresolved.size:
            raise Unresolved(unresolved)
        counts = np.diff(starts)
        filled = int(np.count_nonzero(counts))
        sum_confidence = np.diff(confidence)
        sum_outcome = np.diff(positives).astype(np.float64)
        edges = np.ones(n_bins + 1)
        edges[0] = 0.0
        if filled > 1:
            cell, offset = self.locate(starts[1:filled])
            lowest = self.low[cell]  # the first sample of each bin after the first
            # The last sample of the bin before: the cell's own value, or the previous
            # cell's largest one when the bin starts a cell.
            highest = np.where(offset > 0, self.low[cell], self.high[cell - 1])
            edges[1:filled] = (highest + lowest) / 2
        return statistics_from_sums(edges, counts, sum_confidence, sum_outcome)

    # KS error -------------------------------------------------------------------------

    def ks_error(self) -> float:
        """:func:`~reliacal.metrics._calibration_tests.ks_of_sorted` of the samples.

        The running sum of ``c - o`` is known at the end of every cell (which ends a
        run of equal confidences); inside a cell of several values it stays within
        the cell's start plus ``[-sum over positives of (1 - c), sum over negatives of
        c]``, so only cells whose bound exceeds the largest known value can hold the
        maximum.
        """
        step = self.sum_confidence - self.positives
        ends = np.cumsum(step)
        largest = float(np.max(np.abs(ends)))
        before = np.concatenate([[0.0], ends[:-1]])
        up = self.sum_confidence - self.sum_positive_confidence
        down = self.positives - self.sum_positive_confidence
        bound = np.maximum(np.abs(before + up), np.abs(before - down))
        candidates = np.flatnonzero(~self.single & (bound > largest))
        if candidates.size:
            # The largest bounds first: they are the likeliest to hold the maximum.
            raise Unresolved(candidates[np.argsort(-bound[candidates], kind="stable")])
        return largest / self.n_samples

    # Monotonic sweep ------------------------------------------------------------------

    def _outcomes_non_decreasing(self) -> bool:
        """Whether the sorted outcomes never go from 1 back to 0 (or Unresolved)."""
        has_positive = np.flatnonzero(self.positives > 0)
        if has_positive.size == 0:
            return True
        first = int(has_positive[0])
        if np.any(self.negatives[first + 1 :] > 0):
            return False
        if self.single[first] or self.negatives[first] == 0:
            return True
        raise Unresolved([first])

    def sweep_n_bins(self) -> int:
        """:func:`~reliacal.metrics._sweep.sweep_n_bins` of the sorted outcomes.

        Each bin count's accuracies are exact where its cuts fall on cell edges or in
        one-value cells; elsewhere the positives before a cut lie in an interval. A
        count is settled when even the least favourable positives keep every
        neighbouring pair in order, or when even the most favourable ones break one;
        the float arithmetic is the in-memory function's, and it is monotone in the
        positives, so a settled count is settled for the exact data too.
        """
        n_samples = self.n_samples
        if self._outcomes_non_decreasing():
            return n_samples
        needs: list[np.ndarray] = []
        n_needs = 0
        last_trial = n_samples
        n_bins = 1
        while n_bins < n_samples and n_bins < last_trial:
            trial = n_bins + 1
            starts = array_split_starts(n_samples, trial)
            sizes = np.diff(starts)
            low, high, unresolved = self.positives_bounds(starts)
            most = (high[1:] - low[:-1]) / sizes
            least = (low[1:] - high[:-1]) / sizes
            if np.any(most[1:] - least[:-1] < 0):
                break  # some pair decreases whatever the order inside the cells
            if not unresolved.size or np.all(least[1:] - most[:-1] >= 0):
                n_bins = trial
                continue
            undecided = np.flatnonzero(least[1:] - most[:-1] < 0)
            ranks = np.unique(np.concatenate([undecided, undecided + 1, undecided + 2]))
            cell, offset = self.locate(starts[ranks])
            cells = self._unresolved(cell, offset)
            if not needs:
                # Later counts matter only if this one keeps its order: look a little
                # further, and let the next pass settle this one first.
                last_trial = 2 * trial + _SWEEP_LOOKAHEAD
            needs.append(cells)
            n_needs += cells.size
            if n_needs >= _SWEEP_NEEDS:
                break
            n_bins = trial
        if needs:
            raise Unresolved(np.concatenate(needs))
        return n_bins

    def sweep_ece(self) -> float:
        """:func:`~reliacal.metrics._sweep.sweep_of_sorted`'s l1 error of the samples."""
        n_bins = self.sweep_n_bins()
        if n_bins == self.n_samples:
            # One sample per bin: the mean of |o - c|.
            total = np.sum(self.sum_confidence - self.sum_positive_confidence) + np.sum(
                self.positives - self.sum_positive_confidence
            )
            return float(total / self.n_samples)
        return error_from_statistics(self.quantile_statistics(n_bins), "l1")

    # Refinement -----------------------------------------------------------------------

    def replaced(self, cells: np.ndarray, parts: Cells) -> Cells:
        """These cells with ``cells`` (indices) replaced by ``parts`` (their samples).

        Raises ``ValueError`` when ``parts`` do not hold as many samples as the cells
        they replace: the pass did not see the same data.
        """
        cells = np.asarray(cells, dtype=np.intp)
        if int(parts.count.sum()) != int(self.count[cells].sum()):
            raise ValueError(
                "a later pass over the data did not see the samples of the first one "
                f"({int(parts.count.sum())} samples where the first pass had "
                f"{int(self.count[cells].sum())}): every pass must read the same rows"
            )
        keep = np.ones(len(self), dtype=bool)
        keep[cells] = False
        order = np.argsort(np.concatenate([self.low[keep], parts.low]), kind="stable")

        def joined(name):
            return np.concatenate([getattr(self, name)[keep], getattr(parts, name)])[order]

        return Cells(
            joined("count"),
            joined("positives"),
            joined("sum_confidence"),
            joined("sum_positive_confidence"),
            joined("low"),
            joined("high"),
        )
