"""Passes over the data that refine a fine histogram until the sorted metrics are exact.

After the first pass a stream knows its samples as :class:`~reliacal.metrics._cells.Cells`
(the buckets of a :class:`~reliacal.metrics._histogram.ScoreHistogram`). The quantile
bins, the KS error and the monotonic sweep name the cells whose inner order they
depend on (a cut of the equal-mass bins inside one, a possible maximum of the KS
curve, an undecided bin count of the sweep). :func:`refinement_for` plans the next
pass: a
:class:`Refinement` collects the samples of the needed cells (each then becomes one
cell per distinct value, whose order is known) or, for cells too large to hold,
sums them in ``2**SUB_BITS`` finer cells by the bits of the confidence, so that a
later pass can resolve the few that still matter. Memory stays bounded by
``RESOLVE_SAMPLES`` collected samples and ``SPLIT_CELLS`` finer cells per pass,
whatever the number of rows; a typical table needs one refining pass, and the
splits end after at most four (a float64 has 64 bits).
"""

from __future__ import annotations

import numpy as np

from reliacal.metrics._cells import Cells, Unresolved
from reliacal.metrics._histogram import N_BUCKETS, bucket_of
from reliacal.metrics._inputs import check_prediction_inputs
from reliacal.metrics._predictions import confidences_and_outcomes, row_maxima
from reliacal.metrics._sorted import score_key, scores_of_key

__all__ = ["RESOLVE_SAMPLES", "SPLIT_CELLS", "SUB_BITS", "Refinement", "refinement_for"]

# Samples collected per pass (8 bytes each, and as much again to sort them).
RESOLVE_SAMPLES = 1 << 23
# Finer cells per pass (six 8-byte sums each), and how many a split cell becomes.
SPLIT_CELLS = 1 << 18
SUB_BITS = 12


def needed_cells(cells: Cells, n_bins: int) -> np.ndarray:
    """The cells the sorted metrics depend on, most urgent first (with repeats)."""
    needs = []
    for compute in (
        lambda: cells.quantile_statistics(n_bins),
        cells.ks_error,
        cells.sweep_ece,
    ):
        try:
            compute()
        except Unresolved as unresolved:
            needs.append(unresolved.cells)
    return np.concatenate(needs) if needs else np.zeros(0, dtype=np.intp)


def _first_occurrences(values: np.ndarray) -> np.ndarray:
    _, first = np.unique(values, return_index=True)
    return values[np.sort(first)]


def plan(cells: Cells, needs: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``(resolve, split)``: the needed cells to collect, and those to split, this pass."""
    needs = _first_occurrences(np.asarray(needs, dtype=np.intp))
    counts = cells.count[needs]
    large = counts > RESOLVE_SAMPLES // 64
    split = needs[large][: SPLIT_CELLS >> SUB_BITS]
    small = needs[~large]
    resolve = small[np.cumsum(cells.count[small]) <= RESOLVE_SAMPLES]
    return np.sort(resolve), np.sort(split)


def _bucket_table(lows: np.ndarray, highs: np.ndarray) -> np.ndarray:
    """Which level-one buckets meet one of the ranges ``[low, high]``."""
    marks = np.zeros(N_BUCKETS + 1, dtype=np.int64)
    np.add.at(marks, bucket_of(lows), 1)
    np.add.at(marks, bucket_of(highs) + 1, -1)
    return np.cumsum(marks[:-1]) > 0


class Refinement:
    """One pass over the data: the samples of some cells, finer sums of others.

    Built by :func:`refinement_for`; fed every batch of the data that built the
    histogram (:meth:`update`, in any order and partitioning), merged across
    workers (:meth:`merge`; :meth:`fresh` starts a worker's part), and applied
    with :meth:`apply`.
    """

    def __init__(self, cells: Cells, resolve, split, *, labels=None):
        resolve = np.asarray(resolve, dtype=np.intp)
        split = np.asarray(split, dtype=np.intp)
        self.labels = labels
        self.n_expected = cells.n_samples
        self.resolve = resolve
        self.split = split
        targets = np.concatenate([resolve, split])
        order = np.argsort(cells.low[targets], kind="stable")
        self._lows = cells.low[targets][order]
        self._highs = cells.high[targets][order]
        # -1: collect the samples; k >= 0: the k-th split cell.
        kind = np.concatenate([np.full(resolve.size, -1), np.arange(split.size)])
        self._kind = kind[order]
        self._table = _bucket_table(self._lows, self._highs)
        low_bits = cells.low[split].view(np.int64)
        spans = cells.high[split].view(np.int64) - low_bits
        # (bits - low) >> shift lies in [0, 2**SUB_BITS) for every value of the cell.
        self._base = low_bits
        self._shift = np.array(
            [max(0, int(span).bit_length() - SUB_BITS) for span in spans], dtype=np.int64
        )
        self._start()

    def _start(self) -> None:
        """Empty accumulators (the plan is kept)."""
        self.n_seen = 0
        self._keys: list[np.ndarray] = []
        self._sub = None  # finer cells' sums, allocated by the first sample of a split cell

    def fresh(self) -> Refinement:
        """A new, empty part of the same pass (for one worker's rows)."""
        part = object.__new__(Refinement)
        part.__dict__.update(self.__dict__)
        part._start()
        return part

    def _sub_sums(self) -> dict[str, np.ndarray]:
        if self._sub is None:
            n_sub = self.split.size << SUB_BITS
            self._sub = {
                "count": np.zeros(n_sub, dtype=np.int64),
                "positives": np.zeros(n_sub, dtype=np.int64),
                "sum_confidence": np.zeros(n_sub),
                "sum_positive_confidence": np.zeros(n_sub),
                "low": np.full(n_sub, np.inf),
                "high": np.full(n_sub, -np.inf),
            }
        return self._sub

    def update(self, y_true, y_prob) -> Refinement:
        """Add a batch of labels and probabilities: the rows of the first pass, again.

        Labels and shapes are checked as the state's updates check them; the
        probabilities' values were checked by the first pass, whose rows these are
        (a pass that sees other rows fails :meth:`apply`'s count of the samples). The
        top label is needed only for rows whose confidence falls in a refined cell:
        the others cost a row maximum.
        """
        y_index, y_prob, _, _ = check_prediction_inputs(y_true, y_prob, labels=self.labels)
        if y_prob.ndim == 1:
            self.add_scores(*confidences_and_outcomes(y_index, y_prob, "top-label"))
            return self
        confidence = row_maxima(y_prob)
        self.n_seen += confidence.shape[0]
        rows = self._candidates(confidence)
        if rows.shape[0]:
            correct = np.argmax(y_prob[rows], axis=1) == y_index[rows]
            self._add_candidates(confidence[rows], correct)
        return self

    def add_scores(self, confidence: np.ndarray, outcome: np.ndarray) -> None:
        """Add validated float64 confidences (no ``-0.0``) and boolean outcomes."""
        self.n_seen += confidence.shape[0]
        rows = self._candidates(confidence)
        if rows.shape[0]:
            self._add_candidates(confidence[rows], outcome[rows])

    def _candidates(self, confidence: np.ndarray) -> np.ndarray:
        """The samples whose level-one bucket meets a refined cell."""
        if not self._kind.size:
            return np.zeros(0, dtype=np.intp)
        return np.flatnonzero(self._table[bucket_of(confidence)])

    def _add_candidates(self, confidence: np.ndarray, outcome: np.ndarray) -> None:
        target = np.searchsorted(self._lows, confidence, side="right") - 1
        inside = (target >= 0) & (confidence <= self._highs[np.maximum(target, 0)])
        confidence, outcome, kind = confidence[inside], outcome[inside], self._kind[target[inside]]
        collect = kind < 0
        if np.any(collect):
            self._keys.append(score_key(confidence[collect], outcome[collect]))
        if not np.all(collect):
            slot = kind[~collect]
            values, positive = confidence[~collect], outcome[~collect]
            sub = (slot << SUB_BITS) + (
                (values.view(np.int64) - self._base[slot]) >> self._shift[slot]
            )
            sums = self._sub_sums()
            np.add.at(sums["count"], sub, 1)
            np.add.at(sums["positives"], sub, positive.astype(np.int64))
            np.add.at(sums["sum_confidence"], sub, values)
            np.add.at(sums["sum_positive_confidence"], sub, np.where(positive, values, 0.0))
            np.minimum.at(sums["low"], sub, values)
            np.maximum.at(sums["high"], sub, values)

    def merge(self, other: Refinement) -> Refinement:
        """Add another worker's part of the same pass (in place); return ``self``."""
        self.n_seen += other.n_seen
        self._keys.extend(other._keys)
        if other._sub is not None:
            sums = self._sub_sums()
            for name in ("count", "positives", "sum_confidence", "sum_positive_confidence"):
                sums[name] += other._sub[name]
            np.minimum(sums["low"], other._sub["low"], out=sums["low"])
            np.maximum(sums["high"], other._sub["high"], out=sums["high"])
        return self

    def _resolved(self) -> Cells:
        """One cell per distinct value of the collected samples."""
        keys = np.concatenate(self._keys) if self._keys else np.zeros(0, dtype=np.int64)
        self._keys = []
        keys.sort()
        confidence, outcome = scores_of_key(keys)
        if not confidence.size:
            return Cells(*(np.zeros(0) for _ in range(6)))
        first = np.flatnonzero(np.concatenate([[True], confidence[1:] != confidence[:-1]]))
        count = np.diff(np.concatenate([first, [confidence.size]]))
        positives = np.add.reduceat(outcome, first, dtype=np.int64)
        value = confidence[first]
        return Cells(count, positives, count * value, positives * value, value, value)

    def apply(self, cells: Cells) -> Cells:
        """``cells`` with this pass's cells resolved and split."""
        if self.n_seen != self.n_expected:
            raise ValueError(
                f"a later pass over the data saw {self.n_seen} samples where the first saw "
                f"{self.n_expected}: every pass must read the same rows"
            )
        resolved = self._resolved()
        finer = Cells(*(self._sub_sums()[name] for name in _FIELDS))
        parts = Cells(*(np.concatenate([getattr(resolved, n), getattr(finer, n)]) for n in _FIELDS))
        return cells.replaced(np.concatenate([self.resolve, self.split]), parts)


_FIELDS = ("count", "positives", "sum_confidence", "sum_positive_confidence", "low", "high")


def refinement_for(cells: Cells, n_bins: int) -> Refinement | None:
    """The next pass that the quantile bins, KS and the sweep need, or None."""
    needs = needed_cells(cells, n_bins)
    if not needs.size:
        return None
    resolve, split = plan(cells, needs)
    return Refinement(cells, resolve, split)
