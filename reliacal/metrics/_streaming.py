"""Mergeable metric state for predictions that arrive in batches or live in several processes."""

from __future__ import annotations

import numpy as np

from reliacal._validation import check_classwise_bins, check_n_bins
from reliacal.metrics._binning import BinnedStatistics
from reliacal.metrics._inputs import check_prediction_inputs
from reliacal.metrics._refinement import Refinement
from reliacal.metrics._registry import (
    BY_NAME,
    FROM_HISTOGRAM,
    NEED_SAMPLES,
    STREAMABLE,
    compute,
    describe,
)
from reliacal.metrics._summary import summarize
from reliacal.metrics._sums import MetricSums, NeedsAnotherPass

# Passes refine_with makes at most (each settles what the last one could not; the
# refinement's splits end within a few).
_MAX_PASSES = 16


class CalibrationState:
    """Streaming calibration metrics: ``update`` per batch, ``merge`` across workers.

    The state keeps per-bin sums, so its size does not grow with the data. These
    metrics stream exactly, i.e. ``compute()`` equals the one-shot functions on all
    the data concatenated (up to floating-point summation order, ~1e-15):

    {streamable}

    Quantile bins, the smooth ECE and the sorted metrics (the KS error, the
    monotonic sweep, CORP) depend on all confidences at once and cannot be built
    from fixed-size sums: a quantile bin, a kernel window, a step of the KS curve or
    a PAV block can span samples of every batch, and where it ends depends on the
    confidences' global order. With ``keep_confidences=True`` the state stores
    one confidence and one correctness flag per sample (O(n), not O(nK)) and
    ``compute()`` adds these; without it, asking for them raises:

    {need_samples}

    With ``histogram=True`` the state keeps instead, in constant memory, a fine
    histogram of the confidences: ``2**20`` buckets of width ``2**-20``, each with
    its count, positives, sums of the confidences (over all, over the positives,
    of their squares) and its least and largest confidence (about 56 MB), from
    which these follow:

    {from_histogram}

    The quantile bins, the KS error and the monotonic sweep are exact once further
    passes over the same data have collected the samples of the few buckets whose
    inner order they depend on: a bucket that a quantile cut falls in, one whose
    bounds let the KS curve exceed its largest known value, one that a cut of an
    undecided bin count of the sweep falls in (a bucket of one value needs
    nothing: its ties are ordered by outcome). :meth:`refine_with` makes the
    passes, usually one; :meth:`refinement` and :meth:`refine` make one at a time,
    for data spread over workers. A pass collects at most ``2**23`` samples, and
    splits larger buckets into finer cells by the bits of the confidence first (a
    further pass then collects the few that still matter). Their values equal the
    one-shot functions up to floating-point summation order, as the sums do.

    The smooth ECE needs no further pass: its bandwidth search spreads the samples
    linearly onto fixed grids, and the samples of a bucket between two grid points
    spread as the bucket's sums do; the first pass spreads the samples of the few
    buckets that hold a grid point one by one. It equals the one-shot function up
    to the rounding of the grid positions: an absolute difference below ``1e-11``
    (the grids have at most 5,121 points, whose positions carry a relative error
    of ``2**-52``), unless the bandwidth search meets a tie within that margin.

    Parameters
    ----------
    n_bins : int, default=15
        Number of bins.
    labels : array-like of shape (K,), optional
        The class of each column, fixed for all batches (needed for string labels).
    keep_confidences : bool, default=False
        Store per-sample confidences so that quantile-bin and smooth metrics can be
        computed.
    histogram : bool, default=False
        Keep a fine histogram of the confidences instead (constant memory), from
        which further passes over the data give the confidence-based metrics exactly.

    Attributes
    ----------
    n_samples : int
        Samples seen so far.
    n_classes : int or None
        Number of columns (2 for 1-D binary input); None before the first update.

    Notes
    -----
    Every batch must have the columns of the first: the same number of classes, and
    for a binary problem the same form, 1-D positive-class probabilities or two
    columns (their Brier scores differ by a factor of 2, see :func:`brier_score`).
    A batch in another form raises ``ValueError``, as does merging such states.

    Examples
    --------
    >>> rng = np.random.default_rng(0)
    >>> y_prob = rng.dirichlet(np.ones(5), size=1000)
    >>> y = rng.integers(0, 5, size=1000)
    >>> state = CalibrationState()
    >>> for start in range(0, 1000, 300):
    ...     _ = state.update(y[start : start + 300], y_prob[start : start + 300])
    >>> from reliacal.metrics import expected_calibration_error
    >>> bool(np.isclose(state.compute()["ece"], expected_calibration_error(y, y_prob)))
    True

    States from several workers merge (they pickle, so they can travel between
    processes):

    >>> first, second = CalibrationState(), CalibrationState()
    >>> _ = first.update(y[:500], y_prob[:500]); _ = second.update(y[500:], y_prob[500:])
    >>> bool(np.isclose(first.merge(second).compute()["nll"], state.compute()["nll"]))
    True
    """

    def __init__(
        self,
        n_bins: int = 15,
        *,
        labels=None,
        keep_confidences: bool = False,
        histogram: bool = False,
    ):
        self.n_bins = check_n_bins(n_bins)
        self.labels = None if labels is None else np.asarray(labels)
        self.keep_confidences = bool(keep_confidences)
        self.histogram = bool(histogram)
        if self.keep_confidences and self.histogram:
            raise ValueError(
                "keep_confidences=True keeps every confidence, histogram=True a fine "
                "histogram of them instead: choose one"
            )
        self._sums = None  # MetricSums, created by the first batch (it fixes n_classes)
        # Whether the batches are 1-D positive-class probabilities (fixed by the first).
        self._one_dimensional = None

    @property
    def n_samples(self) -> int:
        """Samples seen so far."""
        return 0 if self._sums is None else self._sums.n_samples

    @property
    def n_classes(self) -> int | None:
        """Number of columns (2 for 1-D binary input); None before the first update."""
        return None if self._sums is None else self._sums.n_classes

    def __repr__(self) -> str:
        return (
            f"CalibrationState(n_bins={self.n_bins}, n_samples={self.n_samples}, "
            f"n_classes={self.n_classes}, keep_confidences={self.keep_confidences}, "
            f"histogram={self.histogram})"
        )

    def _check_form(self, n_classes: int, one_dimensional: bool) -> None:
        """Refuse a batch (or a state) whose columns differ from the state's."""
        if self._sums is None:
            check_classwise_bins(self.n_bins, n_classes)
            return
        if n_classes != self._sums.n_classes:
            raise ValueError(
                f"batch has {n_classes} classes but the state has {self._sums.n_classes}; "
                "every batch must have the same columns"
            )
        if one_dimensional != self._one_dimensional:
            forms = {True: "1-D positive-class probabilities", False: "two columns"}
            raise ValueError(
                f"batch has {forms[one_dimensional]} but the state holds "
                f"{forms[self._one_dimensional]}: the Brier score of 1-D binary input is "
                "mean (p - y)^2 and that of two columns twice it, so a state takes one "
                "form; pass every batch in the same form"
            )

    def _add(self, sums: MetricSums, one_dimensional: bool) -> None:
        self._check_form(sums.n_classes, one_dimensional)
        if self._sums is None:
            self._sums = MetricSums(
                self.n_bins,
                sums.n_classes,
                keep_samples=self.keep_confidences,
                histogram=self.histogram,
            )
            self._one_dimensional = one_dimensional
        self._sums.merge(sums)

    def update(self, y_true, y_prob) -> CalibrationState:
        """Add a batch of labels and probabilities (validated as the metric functions do).

        Parameters
        ----------
        y_true : array-like of shape (n,)
            True labels.
        y_prob : array-like of shape (n, K) or (n,)
            Predicted probabilities.

        Returns
        -------
        CalibrationState
            ``self``.
        """
        y_index, y_prob, _, values = check_prediction_inputs(y_true, y_prob, labels=self.labels)
        one_dimensional = y_prob.ndim == 1
        self._check_form(2 if one_dimensional else y_prob.shape[1], one_dimensional)
        summary = summarize(y_index, y_prob, self.n_bins, values)
        # A histogram state bins the batch's samples as they are merged in.
        keep = self.keep_confidences or self.histogram
        self._add(MetricSums.of_summary(summary, keep_samples=keep), one_dimensional)
        return self

    def merge(self, other: CalibrationState) -> CalibrationState:
        """Add another state's data to this one (in place).

        Parameters
        ----------
        other : CalibrationState
            A state with the same ``n_bins``, ``labels``, ``keep_confidences`` and
            ``histogram``, whose batches had the same columns (class count, and 1-D or
            two columns). Refinements of either apply to its own data only: a merged
            histogram state is refined anew.

        Returns
        -------
        CalibrationState
            ``self``.
        """
        if not isinstance(other, CalibrationState):
            raise ValueError(f"can only merge a CalibrationState, got {type(other).__name__}")
        if (other.n_bins, other.keep_confidences, other.histogram) != (
            self.n_bins,
            self.keep_confidences,
            self.histogram,
        ):
            raise ValueError(
                "cannot merge states with different n_bins, keep_confidences or histogram: "
                f"{self!r} and {other!r}"
            )
        same_labels = (self.labels is None and other.labels is None) or (
            self.labels is not None
            and other.labels is not None
            and np.array_equal(self.labels, other.labels)
        )
        if not same_labels:
            raise ValueError("cannot merge states with different labels")
        if other._sums is not None:
            self._add(other._sums, other._one_dimensional)
        return self

    def binned_statistics(self) -> BinnedStatistics:
        """Top-label uniform-bin statistics of all data seen (for reliability diagrams)."""
        self._check_not_empty()
        return self._sums.uniform_statistics()

    def _check_not_empty(self) -> None:
        if self.n_samples == 0:
            raise ValueError("the state is empty: call update() with data first")

    def _available(self) -> tuple[str, ...]:
        if self.keep_confidences:
            return STREAMABLE + NEED_SAMPLES
        if self.histogram:
            return STREAMABLE + FROM_HISTOGRAM
        return STREAMABLE

    def compute(self, metrics=None) -> dict[str, float]:
        """The metrics of all data seen so far.

        Parameters
        ----------
        metrics : sequence of str, optional
            Names to compute; default: every available one (those of the class
            docstring, plus the confidence-based ones when ``keep_confidences``, or
            those a histogram gives when ``histogram``).

        Returns
        -------
        dict of str to float

        Raises
        ------
        ValueError
            For a confidence-based metric of a state that keeps neither the
            confidences nor a histogram, or of a histogram that needs another pass
            over the data (:meth:`refine_with`).
        """
        self._check_not_empty()
        known = STREAMABLE + NEED_SAMPLES
        if metrics is None:
            metrics = self._available()
        elif isinstance(metrics, str):
            metrics = (metrics,)
        unknown = [name for name in metrics if name not in known]
        if unknown:
            raise ValueError(f"unknown metrics {unknown}; available: {list(known)}")
        needs_confidences = [name for name in metrics if BY_NAME[name].needs_samples]
        if needs_confidences and not (self.keep_confidences or self.histogram):
            raise ValueError(
                f"{needs_confidences} need every confidence (quantile bins, kernel smoothing, "
                "sorted confidences) and cannot stream from bin sums; create the state with "
                "keep_confidences=True, or with histogram=True and refine it with further "
                "passes over the data (refine_with)"
            )
        not_from_histogram = [name for name in needs_confidences if name not in FROM_HISTOGRAM]
        if self.histogram and not_from_histogram:
            raise ValueError(
                f"{not_from_histogram} need every confidence, which a histogram state does not "
                "keep: create the state with keep_confidences=True"
            )
        try:
            return compute(self._sums, metrics)
        except NeedsAnotherPass as error:
            names = [name for name in needs_confidences if name in FROM_HISTOGRAM]
            raise ValueError(f"{names}: {error}") from None

    def refinement(self) -> Refinement | None:
        """The next pass over the data that a histogram state needs, or None.

        Returns
        -------
        Refinement or None
            None when every metric the histogram gives is exact (and for states
            without ``histogram=True``). Otherwise feed it every batch of the same
            data (``refinement.update(y_true, y_prob)``, in any order and
            partitioning; parts from several workers combine with
            ``refinement.merge(other)``, and ``refinement.fresh()`` starts another
            part) and pass it to :meth:`refine`.
        """
        if not self.histogram or self._sums is None:
            return None
        refinement = self._sums.refinement()
        if refinement is not None:
            refinement.labels = self.labels
        return refinement

    def refine(self, refinement: Refinement) -> CalibrationState:
        """Apply a completed :meth:`refinement` pass.

        Parameters
        ----------
        refinement : Refinement
            The object :meth:`refinement` returned, fed every batch once more.

        Returns
        -------
        CalibrationState
            ``self``.

        Raises
        ------
        ValueError
            When the pass saw other rows than the state (another number of samples,
            or other samples in the refined buckets).
        """
        if not isinstance(refinement, Refinement):
            raise ValueError(f"expected a Refinement, got {type(refinement).__name__}")
        self._sums.refine(refinement)
        return self

    def refine_with(self, batches) -> CalibrationState:
        """Make the passes that a histogram state needs: :meth:`refinement` until None.

        Parameters
        ----------
        batches : callable
            Called with no arguments once per pass, it returns an iterable of
            ``(y_true, y_prob)`` batches: the rows the state was updated with (in any
            order and partitioning).

        Returns
        -------
        CalibrationState
            ``self``, whose :meth:`compute` then gives every metric of the histogram.

        Examples
        --------
        >>> rng = np.random.default_rng(0)
        >>> y_prob = rng.dirichlet(np.ones(3), size=2000)
        >>> y = rng.integers(0, 3, size=2000)
        >>> def batches():
        ...     return ((y[s : s + 500], y_prob[s : s + 500]) for s in range(0, 2000, 500))
        >>> state = CalibrationState(histogram=True)
        >>> for y_batch, p_batch in batches():
        ...     _ = state.update(y_batch, p_batch)
        >>> from reliacal.metrics import ks_calibration_error
        >>> value = state.refine_with(batches).compute(["ks_error"])["ks_error"]
        >>> bool(np.isclose(value, ks_calibration_error(y, y_prob), rtol=1e-12))
        True
        """
        for _ in range(_MAX_PASSES):
            refinement = self.refinement()
            if refinement is None:
                return self
            for y_true, y_prob in batches():
                refinement.update(y_true, y_prob)
            self.refine(refinement)
        raise RuntimeError(f"the histogram was not exact after {_MAX_PASSES} passes")


# The metric lists are written from the metric table, so that they cannot drift from it.
CalibrationState.__doc__ = (
    CalibrationState.__doc__.replace("    {streamable}", describe(STREAMABLE, indent=4))
    .replace("    {need_samples}", describe(NEED_SAMPLES, indent=4))
    .replace("    {from_histogram}", describe(FROM_HISTOGRAM, indent=4))
)
