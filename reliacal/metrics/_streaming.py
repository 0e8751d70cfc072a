"""Mergeable metric state for predictions that arrive in batches or live in several processes."""

from __future__ import annotations

import numpy as np

from reliacal._validation import check_classwise_bins, check_n_bins
from reliacal.metrics._binning import BinnedStatistics
from reliacal.metrics._inputs import check_predictions
from reliacal.metrics._registry import BY_NAME, NEED_SAMPLES, STREAMABLE, compute, describe
from reliacal.metrics._summary import summarize
from reliacal.metrics._sums import MetricSums


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

    Parameters
    ----------
    n_bins : int, default=15
        Number of bins.
    labels : array-like of shape (K,), optional
        The class of each column, fixed for all batches (needed for string labels).
    keep_confidences : bool, default=False
        Store per-sample confidences so that quantile-bin and smooth metrics can be
        computed.

    Attributes
    ----------
    n_samples : int
        Samples seen so far.
    n_classes : int or None
        Number of columns (2 for 1-D binary input); None before the first update.

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

    def __init__(self, n_bins: int = 15, *, labels=None, keep_confidences: bool = False):
        self.n_bins = check_n_bins(n_bins)
        self.labels = None if labels is None else np.asarray(labels)
        self.keep_confidences = bool(keep_confidences)
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
            f"n_classes={self.n_classes}, keep_confidences={self.keep_confidences})"
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
            self._sums = MetricSums(self.n_bins, sums.n_classes, keep_samples=self.keep_confidences)
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
        y_index, y_prob, _ = check_predictions(y_true, y_prob, labels=self.labels)
        one_dimensional = y_prob.ndim == 1
        self._check_form(2 if one_dimensional else y_prob.shape[1], one_dimensional)
        summary = summarize(y_index, y_prob, self.n_bins)
        self._add(
            MetricSums.of_summary(summary, keep_samples=self.keep_confidences), one_dimensional
        )
        return self

    def merge(self, other: CalibrationState) -> CalibrationState:
        """Add another state's data to this one (in place).

        Parameters
        ----------
        other : CalibrationState
            A state with the same ``n_bins``, ``labels`` and ``keep_confidences``, whose
            batches had the same columns (class count, and 1-D or two columns).

        Returns
        -------
        CalibrationState
            ``self``.
        """
        if not isinstance(other, CalibrationState):
            raise ValueError(f"can only merge a CalibrationState, got {type(other).__name__}")
        if other.n_bins != self.n_bins or other.keep_confidences != self.keep_confidences:
            raise ValueError(
                "cannot merge states with different n_bins or keep_confidences: "
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

    def compute(self, metrics=None) -> dict[str, float]:
        """The metrics of all data seen so far.

        Parameters
        ----------
        metrics : sequence of str, optional
            Names to compute; default: every available one (those of the class
            docstring, plus the confidence-based ones when ``keep_confidences``).

        Returns
        -------
        dict of str to float
        """
        self._check_not_empty()
        available = STREAMABLE + NEED_SAMPLES
        if metrics is None:
            metrics = available if self.keep_confidences else STREAMABLE
        elif isinstance(metrics, str):
            metrics = (metrics,)
        unknown = [name for name in metrics if name not in available]
        if unknown:
            raise ValueError(f"unknown metrics {unknown}; available: {list(available)}")
        needs_confidences = [name for name in metrics if BY_NAME[name].needs_samples]
        if needs_confidences and not self.keep_confidences:
            raise ValueError(
                f"{needs_confidences} need every confidence (quantile bins, kernel smoothing, "
                "sorted confidences) and cannot stream from bin sums; create the state with "
                "keep_confidences=True"
            )
        return compute(self._sums, metrics)


# The metric lists are written from the metric table, so that they cannot drift from it.
CalibrationState.__doc__ = CalibrationState.__doc__.replace(
    "    {streamable}", describe(STREAMABLE, indent=4)
).replace("    {need_samples}", describe(NEED_SAMPLES, indent=4))
