"""The sums every registered metric is computed from; they add up across batches.

:class:`MetricSums` holds the top-label uniform-bin sums, the classwise
``(K, n_bins)`` sums, the sums of the per-sample log-losses and Brier terms, and,
when asked to, every confidence and correctness flag (the quantile-bin, smooth
and sorted metrics need them all) or, in constant memory, a fine histogram of them
that further passes over the data refine until those metrics are exact
(:mod:`reliacal.metrics._refinement`). The report builds one per model (and per
bootstrap replicate), the streaming state adds one per batch.
"""

from __future__ import annotations

import numpy as np

from reliacal.metrics._binning import (
    BinnedStatistics,
    bin_scores,
    statistics_from_sums,
    uniform_edges,
    uniform_sums,
    uniform_sums_of_sorted,
)
from reliacal.metrics._calibration_tests import ks_of_sorted, spiegelhalter_sums
from reliacal.metrics._cells import Cells, Unresolved
from reliacal.metrics._histogram import ScoreHistogram
from reliacal.metrics._predictions import ClasswiseSums
from reliacal.metrics._refinement import Refinement, refinement_for
from reliacal.metrics._smooth import GridSmoothing, smooth_ece_of_scores
from reliacal.metrics._sorted import sort_scores
from reliacal.metrics._summary import PredictionSummary
from reliacal.metrics._sweep import sweep_of_sorted


class NeedsAnotherPass(ValueError):
    """A confidence-based metric of a histogram needs a refining pass over the data."""


class MetricSums:
    """Mergeable sums of ``n_bins`` top-label and classwise bins, and of proper scores.

    Parameters
    ----------
    n_bins : int
        Number of uniform bins.
    n_classes : int
        Number of columns of the probabilities.
    keep_samples : bool
        Keep every confidence and correctness flag (O(n)).
    histogram : bool, default=False
        Keep a :class:`~reliacal.metrics._histogram.ScoreHistogram` of them instead
        (constant memory; samples merged in are binned, not kept).
    """

    def __init__(self, n_bins: int, n_classes: int, *, keep_samples: bool, histogram=False):
        self.n_bins = n_bins
        self.n_classes = n_classes
        self.keep_samples = keep_samples
        self.histogram = ScoreHistogram() if histogram else None
        self._cells: Cells | None = None
        self.n_samples = 0
        self.counts = np.zeros(n_bins)
        self.sum_confidence = np.zeros(n_bins)
        self.sum_correct = np.zeros(n_bins)
        self.classwise = ClasswiseSums(*(np.zeros((n_classes, n_bins)) for _ in range(3)))
        self.total_confidence = 0.0
        self.sum_log_loss = 0.0
        self.sum_brier = 0.0
        # Spiegelhalter's numerator and variance of the top-label (confidence, correct).
        self.spiegelhalter_deviation = 0.0
        self.spiegelhalter_variance = 0.0
        self.confidences: list[np.ndarray] = []
        self.corrects: list[np.ndarray] = []
        self._cache: dict[str, object] = {}

    @classmethod
    def of_samples(
        cls,
        confidence,
        correct,
        log_loss,
        brier,
        classwise: ClasswiseSums,
        *,
        keep_samples=True,
        is_sorted=False,
    ) -> MetricSums:
        """The sums of per-sample values and the classwise sums of the same samples.

        ``log_loss`` and ``brier`` are per-sample terms, or their sums. ``is_sorted``:
        ``(confidence, correct)`` are in :func:`sort_scores` order (the uniform bins
        are then found by search, and the sort is kept).
        """
        n_classes, n_bins = classwise.counts.shape
        sums = cls(n_bins, n_classes, keep_samples=keep_samples)
        binning = uniform_sums_of_sorted if is_sorted else uniform_sums
        _, counts, sum_confidence, sum_correct = binning(confidence, correct, n_bins)
        sums.counts += counts
        sums.sum_confidence += sum_confidence
        sums.sum_correct += sum_correct
        sums.classwise = classwise
        sums.n_samples = confidence.shape[0]
        sums.total_confidence = float(np.sum(confidence))
        sums.sum_log_loss = float(np.sum(log_loss))
        sums.sum_brier = float(np.sum(brier))
        sums.spiegelhalter_deviation, sums.spiegelhalter_variance = spiegelhalter_sums(
            confidence, correct
        )
        if keep_samples:
            sums.confidences.append(confidence)
            sums.corrects.append(correct)
            if is_sorted:
                sums._cache["sorted"] = (confidence, correct)
        return sums

    @classmethod
    def of_summary(cls, summary: PredictionSummary, *, keep_samples: bool) -> MetricSums:
        """The sums of one :class:`PredictionSummary`."""
        return cls.of_samples(
            summary.confidence,
            summary.correct,
            summary.log_loss,
            summary.brier,
            summary.classwise,
            keep_samples=keep_samples,
        )

    def merge(self, other: MetricSums) -> MetricSums:
        """Add ``other``'s sums to these (in place); return ``self``."""
        self.n_samples += other.n_samples
        self.counts += other.counts
        self.sum_confidence += other.sum_confidence
        self.sum_correct += other.sum_correct
        for total, part in zip(self.classwise, other.classwise, strict=True):
            total += part
        self.total_confidence += other.total_confidence
        self.sum_log_loss += other.sum_log_loss
        self.sum_brier += other.sum_brier
        self.spiegelhalter_deviation += other.spiegelhalter_deviation
        self.spiegelhalter_variance += other.spiegelhalter_variance
        if self.histogram is None:
            self.confidences.extend(other.confidences)
            self.corrects.extend(other.corrects)
        else:
            for confidence, correct in zip(other.confidences, other.corrects, strict=True):
                self.histogram.add(confidence, correct)
            if other.histogram is not None:
                self.histogram.merge(other.histogram)
            self._cells = None  # other data: the refinements no longer apply
        self._cache.clear()
        return self

    def uniform_statistics(self) -> BinnedStatistics:
        """Top-label statistics of the uniform bins."""
        return statistics_from_sums(
            uniform_edges(self.n_bins), self.counts, self.sum_confidence, self.sum_correct
        )

    def samples(self) -> tuple[np.ndarray, np.ndarray]:
        """Every kept ``(confidence, correct)``, in the order they were added."""
        if self.histogram is not None:
            raise ValueError(
                "this metric needs every confidence, and a histogram state keeps a fine "
                "histogram of them only: create the state with keep_confidences=True"
            )
        if "samples" not in self._cache:
            if len(self.confidences) == 1:
                self._cache["samples"] = (self.confidences[0], self.corrects[0])
            else:
                self._cache["samples"] = (
                    np.concatenate(self.confidences),
                    np.concatenate(self.corrects),
                )
        return self._cache["samples"]

    def sorted_samples(self) -> tuple[np.ndarray, np.ndarray]:
        """The kept samples sorted by confidence, ties by outcome (:func:`sort_scores`)."""
        if "sorted" not in self._cache:
            self._cache["sorted"] = sort_scores(*self.samples())
        return self._cache["sorted"]

    # The confidence-based metrics: from the kept samples, or from the refined histogram.

    def cells(self) -> Cells:
        """The histogram's cells, as refined so far."""
        if self._cells is None:
            self._cells = Cells.from_histogram(self.histogram)
        return self._cells

    def _from_cells(self, compute):
        try:
            return compute(self.cells())
        except Unresolved:
            raise NeedsAnotherPass(_ANOTHER_PASS) from None

    def quantile_statistics(self) -> BinnedStatistics:
        """Top-label statistics of equal-mass bins (needs the samples, or refined cells)."""
        if "quantile" not in self._cache:
            if self.histogram is not None:
                stats = self._from_cells(lambda cells: cells.quantile_statistics(self.n_bins))
            else:
                confidence, correct = self.sorted_samples()
                stats = bin_scores(confidence, correct, self.n_bins, "quantile", is_sorted=True)
            self._cache["quantile"] = stats
        return self._cache["quantile"]

    def smooth_ece(self) -> float:
        """The smooth ECE at its fixed-point bandwidth."""
        if self.histogram is None:
            if "sorted" in self._cache:  # the report's sort: spread run by run
                return smooth_ece_of_scores(*self.sorted_samples(), is_sorted=True)[0]
            return smooth_ece_of_scores(*self.samples())[0]
        problem = GridSmoothing(self.histogram.grids())
        return problem.smooth_ece(problem.fixed_point_bandwidth())

    def ks_error(self) -> float:
        """The KS calibration error."""
        if self.histogram is not None:
            return self._from_cells(Cells.ks_error)
        return ks_of_sorted(*self.sorted_samples())

    def sweep_ece(self) -> float:
        """The monotonic-sweep ECE (l1)."""
        if self.histogram is not None:
            return self._from_cells(Cells.sweep_ece)
        return sweep_of_sorted(*self.sorted_samples())[0]

    def refinement(self) -> Refinement | None:
        """The pass over the data that the histogram's metrics need next, or None."""
        self.histogram.flush()
        return refinement_for(self.cells(), self.n_bins)

    def refine(self, refinement: Refinement) -> None:
        """Apply a completed :meth:`refinement` pass."""
        self._cells = refinement.apply(self.cells())
        self._cache.clear()


_ANOTHER_PASS = (
    "the value needs another pass over the data: the state holds a fine histogram of "
    "the confidences, which CalibrationState.refine_with (or refinement and refine) "
    "makes exact"
)
