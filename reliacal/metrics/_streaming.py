"""Mergeable metric state for predictions that arrive in batches or live in several processes."""

from __future__ import annotations

import numpy as np

from reliacal._validation import check_classwise_bins, check_n_bins, check_probabilities
from reliacal.metrics._binning import (
    BinnedStatistics,
    bin_scores,
    statistics_from_sums,
    uniform_edges,
    uniform_sums,
)
from reliacal.metrics._calibration_error import (
    classwise_uniform_sums,
    combine_classes,
    debiased_error_from_statistics,
    error_from_statistics,
    norm_of_gaps,
)
from reliacal.metrics._smooth import smooth_ece_of_scores
from reliacal.metrics._summary import summarize


class CalibrationState:
    """Streaming calibration metrics: ``update`` per batch, ``merge`` across workers.

    The state keeps per-bin sums, so its size does not grow with the data. These
    metrics stream exactly, i.e. ``compute()`` equals the one-shot functions on all
    the data concatenated (up to floating-point summation order, ~1e-15):

    * ``accuracy``, ``overconfidence`` (mean confidence minus accuracy);
    * ``ece`` and ``mce``: top-label, uniform bins
      (:func:`expected_calibration_error`, :func:`maximum_calibration_error`);
    * ``classwise_ece``: uniform bins (:func:`classwise_calibration_error`);
    * ``nll`` and ``brier``: :func:`negative_log_likelihood`, :func:`brier_score`.

    Quantile bins and the smooth ECE depend on all confidences at once and cannot
    be built from fixed-size sums. With ``keep_confidences=True`` the state stores
    one confidence and one correctness flag per sample (O(n), not O(nK)) and
    ``compute()`` adds ``adaptive_ece`` (quantile ECE), ``debiased_ece``
    (:func:`debiased_calibration_error`) and ``smooth_ece``
    (:func:`smooth_calibration_error`); without it, asking for those raises.

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
        self.n_classes = None
        self.n_samples = 0
        self._counts = np.zeros(self.n_bins)
        self._sum_confidence = np.zeros(self.n_bins)
        self._sum_correct = np.zeros(self.n_bins)
        self._classwise = None  # (counts, sum_probability, sum_outcome), each (K, n_bins)
        self._sum_log_loss = 0.0
        self._sum_brier = 0.0
        self._confidences: list[np.ndarray] = []
        self._corrects: list[np.ndarray] = []

    def __repr__(self) -> str:
        return (
            f"CalibrationState(n_bins={self.n_bins}, n_samples={self.n_samples}, "
            f"n_classes={self.n_classes}, keep_confidences={self.keep_confidences})"
        )

    def _set_classes(self, n_classes: int) -> None:
        if self.n_classes is None:
            check_classwise_bins(self.n_bins, n_classes)
            self.n_classes = n_classes
            self._classwise = tuple(np.zeros((n_classes, self.n_bins)) for _ in range(3))
        elif n_classes != self.n_classes:
            raise ValueError(
                f"batch has {n_classes} classes but the state has {self.n_classes}; "
                "every batch must have the same columns"
            )

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
        y_index, y_prob, _ = check_probabilities(y_true, y_prob, labels=self.labels)
        self._set_classes(2 if y_prob.ndim == 1 else y_prob.shape[1])
        summary = summarize(y_index, y_prob, self.n_bins)
        _, counts, sum_confidence, sum_correct = uniform_sums(
            summary.confidence, summary.correct, self.n_bins
        )
        self._counts += counts
        self._sum_confidence += sum_confidence
        self._sum_correct += sum_correct
        classwise = classwise_uniform_sums(
            summary.classwise, y_index, summary.true_probability, self.n_bins
        )
        for total, part in zip(self._classwise, classwise, strict=True):
            total += part
        self._sum_log_loss += float(np.sum(summary.log_loss))
        self._sum_brier += float(np.sum(summary.brier))
        self.n_samples += y_index.shape[0]
        if self.keep_confidences:
            self._confidences.append(summary.confidence)
            self._corrects.append(summary.correct)
        return self

    def merge(self, other: CalibrationState) -> CalibrationState:
        """Add another state's data to this one (in place).

        Parameters
        ----------
        other : CalibrationState
            A state with the same ``n_bins``, ``labels`` and ``keep_confidences``.

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
        if other.n_classes is None:
            return self
        self._set_classes(other.n_classes)
        self._counts += other._counts
        self._sum_confidence += other._sum_confidence
        self._sum_correct += other._sum_correct
        for total, part in zip(self._classwise, other._classwise, strict=True):
            total += part
        self._sum_log_loss += other._sum_log_loss
        self._sum_brier += other._sum_brier
        self.n_samples += other.n_samples
        self._confidences.extend(other._confidences)
        self._corrects.extend(other._corrects)
        return self

    def binned_statistics(self) -> BinnedStatistics:
        """Top-label uniform-bin statistics of all data seen (for reliability diagrams)."""
        self._check_not_empty()
        return statistics_from_sums(
            uniform_edges(self.n_bins), self._counts, self._sum_confidence, self._sum_correct
        )

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
        exact = ("accuracy", "ece", "classwise_ece", "mce", "nll", "brier", "overconfidence")
        kept = ("adaptive_ece", "debiased_ece", "smooth_ece")
        if metrics is None:
            metrics = exact + kept if self.keep_confidences else exact
        elif isinstance(metrics, str):
            metrics = (metrics,)
        unknown = [name for name in metrics if name not in exact + kept]
        if unknown:
            raise ValueError(f"unknown metrics {unknown}; available: {list(exact + kept)}")
        needs_confidences = [name for name in metrics if name in kept]
        if needs_confidences and not self.keep_confidences:
            raise ValueError(
                f"{needs_confidences} need every confidence (quantile bins, kernel smoothing) "
                "and cannot stream from bin sums; create the state with keep_confidences=True"
            )
        stats = self.binned_statistics()
        n = self.n_samples
        accuracy = float(self._sum_correct.sum() / n)
        values = {
            "accuracy": accuracy,
            "ece": error_from_statistics(stats, "l1"),
            "mce": error_from_statistics(stats, "max"),
            "classwise_ece": combine_classes(norm_of_gaps(*self._classwise, "l1"), "l1"),
            "nll": self._sum_log_loss / n,
            "brier": self._sum_brier / n,
            "overconfidence": float(self._sum_confidence.sum() / n) - accuracy,
        }
        if needs_confidences:
            confidence = np.concatenate(self._confidences)
            correct = np.concatenate(self._corrects)
            quantile = bin_scores(confidence, correct, self.n_bins, "quantile")
            values["adaptive_ece"] = error_from_statistics(quantile, "l1")
            values["debiased_ece"] = debiased_error_from_statistics(quantile)
            values["smooth_ece"] = smooth_ece_of_scores(confidence, correct)[0]
        return {name: values[name] for name in metrics}
