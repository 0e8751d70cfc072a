"""Paired bootstrap comparison of several models' metrics on the same labels.

Every model is scored on the same resampled rows in each replicate, so the noise
that the test set shares between models (hard examples, label noise) cancels in the
differences: a paired interval is much narrower than two independent ones.

The replicates are vectorised: for a chunk of replicates the resampled row indices
form one ``(rows, n)`` integer matrix and every metric is a gather, a ``bincount``
or a ``reduceat`` over it. Chunks hold about a million indices, so memory stays
bounded for any number of replicates.
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Mapping, Sequence

import numpy as np
import pandas as pd

from reliacal._validation import check_n_bins, check_option
from reliacal.metrics._calibration_error import (
    debiased_calibration_error,
    expected_calibration_error,
)
from reliacal.metrics._calibration_tests import ks_calibration_error
from reliacal.metrics._inputs import check_predictions
from reliacal.metrics._predictions import binary_columns, confidences_and_outcomes
from reliacal.metrics._scores import accuracy, brier_score, negative_log_likelihood
from reliacal.metrics._sweep import signed_calibration_error
from reliacal.metrics.modes import SCORE_MODES, check_mode

COMPARE_METRICS = (
    "accuracy",
    "ece",
    "adaptive_ece",
    "debiased_ece",
    "mce",
    "ks_ece",
    "signed_ece",
    "nll",
    "brier",
)
DEFAULT_METRICS = ("ece", "debiased_ece", "nll", "brier")

# Resampled indices per chunk of replicates (8 MiB of int64, a few such temporaries).
_CHUNK_INDICES = 1 << 20


def _point_value(metric, y_true, y_prob, n_bins, mode, labels) -> float:
    """The metric on all rows, by the public function that defines it."""
    if metric == "accuracy":
        return accuracy(y_true, y_prob, labels=labels)
    if metric == "nll":
        return negative_log_likelihood(y_true, y_prob, labels=labels)
    if metric == "brier":
        return brier_score(y_true, y_prob, labels=labels)
    if metric == "ks_ece":
        return ks_calibration_error(y_true, y_prob, mode=mode, labels=labels)
    if metric == "signed_ece":
        return signed_calibration_error(y_true, y_prob, mode=mode, labels=labels)
    if metric == "debiased_ece":
        return debiased_calibration_error(y_true, y_prob, n_bins=n_bins, mode=mode, labels=labels)
    strategy = "quantile" if metric == "adaptive_ece" else "uniform"
    norm = "max" if metric == "mce" else "l1"
    return expected_calibration_error(
        y_true, y_prob, n_bins=n_bins, strategy=strategy, norm=norm, mode=mode, labels=labels
    )


class _Samples:
    """Per-row values of one model from which every replicate metric is computed."""

    def __init__(self, y_index, y_prob, n_bins: int, mode: str):
        confidence, outcome = confidences_and_outcomes(y_index, y_prob, mode)
        self.n_bins = n_bins
        self.confidence = confidence
        self.outcome = outcome.astype(np.float64)
        # Right-closed uniform bins with 0 in the first (the package's convention).
        interior = np.arange(1, n_bins, dtype=np.float64) / n_bins
        self.uniform_bin = np.searchsorted(interior, confidence, side="left")
        # Quantile order: by confidence, ties by outcome (negatives first).
        self.order = np.lexsort((self.outcome, confidence))
        sorted_confidence = confidence[self.order]
        self.step_ends = np.flatnonzero(np.diff(sorted_confidence, append=np.inf) > 0)
        if y_prob.ndim == 1:
            positive = y_prob.astype(np.float64)
            true_probability = np.where(y_index == 1, positive, 1.0 - positive)
            self.brier = (positive - y_index) ** 2
        else:
            rows = np.arange(y_index.shape[0])
            true_probability = y_prob[rows, y_index].astype(np.float64)
            squares = np.einsum("ij,ij->i", y_prob, y_prob, dtype=np.float64)
            self.brier = squares - 2.0 * true_probability + 1.0
        eps = float(np.finfo(y_prob.dtype).eps)
        self.log_loss = -np.log(np.clip(true_probability, eps, 1.0 - eps))
        if y_prob.ndim == 1:
            predicted_right = (y_prob > 0.5) == (y_index == 1)
        else:
            predicted_right = np.argmax(y_prob, axis=1) == y_index
        self.correct = predicted_right.astype(np.float64)


def _uniform_sums(samples: _Samples, indices: np.ndarray):
    rows, n_samples = indices.shape
    flat = (np.arange(rows)[:, None] * samples.n_bins + samples.uniform_bin[indices]).ravel()
    size = rows * samples.n_bins
    counts = np.bincount(flat, minlength=size).reshape(rows, -1)
    sum_confidence = np.bincount(
        flat, weights=samples.confidence[indices].ravel(), minlength=size
    ).reshape(rows, -1)
    sum_outcome = np.bincount(flat, weights=samples.outcome[indices].ravel(), minlength=size)
    return counts, sum_confidence, sum_outcome.reshape(rows, -1)


def _quantile_sums(samples: _Samples, indices: np.ndarray):
    rows, n_samples = indices.shape
    # Counting sort: each row's multiplicities in quantile order, expanded by repeat,
    # list that row's resample sorted (every row holds exactly n_samples entries).
    multiplicity = _multiplicities(indices)[:, samples.order]
    sorted_rows = np.repeat(np.tile(samples.order, rows), multiplicity.ravel())
    sorted_rows = sorted_rows.reshape(rows, n_samples)
    base, extra = divmod(n_samples, samples.n_bins)
    sizes = np.full(samples.n_bins, base, dtype=np.int64)
    sizes[:extra] += 1
    sizes = sizes[sizes > 0]  # array_split's empty groups contribute nothing
    starts = np.concatenate([[0], np.cumsum(sizes)[:-1]])
    sum_confidence = np.add.reduceat(samples.confidence[sorted_rows], starts, axis=1)
    sum_outcome = np.add.reduceat(samples.outcome[sorted_rows], starts, axis=1)
    return np.broadcast_to(sizes, sum_confidence.shape), sum_confidence, sum_outcome


def _multiplicities(indices: np.ndarray) -> np.ndarray:
    """How often each row of the data occurs in each replicate, shape (rows, n)."""
    rows, n_samples = indices.shape
    flat = (np.arange(rows)[:, None] * n_samples + indices).ravel()
    return np.bincount(flat, minlength=rows * n_samples).reshape(rows, n_samples)


def _ks(samples: _Samples, indices: np.ndarray) -> np.ndarray:
    n_samples = indices.shape[1]
    multiplicity = _multiplicities(indices)
    residual = (samples.confidence - samples.outcome)[samples.order]
    cumulative = np.cumsum(multiplicity[:, samples.order] * residual, axis=1) / n_samples
    return np.max(np.abs(cumulative[:, samples.step_ends]), axis=1)


def _replicate_values(samples: _Samples, indices: np.ndarray, metrics) -> dict:
    """Each metric on each row of resampled ``indices``, shape (rows,)."""
    n_samples = indices.shape[1]
    values = {}
    per_row = {
        "accuracy": samples.correct,
        "nll": samples.log_loss,
        "brier": samples.brier,
        "signed_ece": samples.confidence - samples.outcome,
    }
    for metric in metrics:
        if metric in per_row:
            values[metric] = per_row[metric][indices].mean(axis=1)
    if "ece" in metrics or "mce" in metrics:
        counts, sum_confidence, sum_outcome = _uniform_sums(samples, indices)
        gap = np.abs(sum_outcome - sum_confidence)
        values["ece"] = gap.sum(axis=1) / n_samples
        values["mce"] = np.max(gap / np.maximum(counts, 1), axis=1)
    if "adaptive_ece" in metrics or "debiased_ece" in metrics:
        counts, sum_confidence, sum_outcome = _quantile_sums(samples, indices)
        values["adaptive_ece"] = np.abs(sum_outcome - sum_confidence).sum(axis=1) / n_samples
        # Kumar et al.: each bin's squared gap less the variance of its accuracy.
        enough = counts >= 2
        safe = np.where(enough, counts, 2)
        bin_accuracy = sum_outcome / safe
        gap = bin_accuracy - sum_confidence / safe
        term = np.where(enough, gap**2 - bin_accuracy * (1.0 - bin_accuracy) / (safe - 1), 0.0)
        squared = (counts * term).sum(axis=1) / n_samples
        values["debiased_ece"] = np.sqrt(np.maximum(squared, 0.0))
    if "ks_ece" in metrics:
        values["ks_ece"] = _ks(samples, indices)
    return {metric: values[metric] for metric in metrics}


def _check_metrics(metrics) -> tuple[str, ...]:
    if isinstance(metrics, str):
        metrics = (metrics,)
    if not isinstance(metrics, Sequence) or len(metrics) == 0:
        raise ValueError(f"metrics must be a non-empty sequence of names, got {metrics!r}")
    for metric in metrics:
        check_option(metric, "each metric", COMPARE_METRICS)
    if len(set(metrics)) != len(metrics):
        raise ValueError(f"metrics has duplicates: {list(metrics)!r}")
    return tuple(metrics)


def _check_settings(predictions, reference, n_bootstraps, confidence_level):
    if not isinstance(predictions, Mapping) or len(predictions) == 0:
        raise ValueError(
            "predictions must be a non-empty mapping of method name to probabilities, "
            'e.g. {"raw": p0, "TS": p1}'
        )
    if reference is None:
        reference = next(iter(predictions))
    elif reference not in predictions:
        raise ValueError(f"reference {reference!r} is not among the methods {list(predictions)!r}")
    return (reference, *check_bootstrap_settings(n_bootstraps, confidence_level))


def check_bootstrap_settings(n_bootstraps, confidence_level) -> tuple[int, float]:
    """``(n_bootstraps, confidence_level)`` as int and float, or a ValueError naming the bad one.

    >>> check_bootstrap_settings(200, 0.9)
    (200, 0.9)
    """
    if (
        isinstance(n_bootstraps, bool)
        or not isinstance(n_bootstraps, int | np.integer)
        or n_bootstraps < 1
    ):
        raise ValueError(f"n_bootstraps must be an integer >= 1, got {n_bootstraps!r}")
    if not isinstance(confidence_level, float | int) or not (0 < confidence_level < 1):
        raise ValueError(f"confidence_level must lie in (0, 1), got {confidence_level!r}")
    return int(n_bootstraps), float(confidence_level)


def _in_one_form(checked: dict) -> dict:
    """The validated ``{name: (y_index, y_prob)}``, every method in the same form.

    Binary methods may come as 1-D positive-class probabilities or as two columns;
    their metrics agree except the Brier score (two columns: twice the 1-D value).
    When both forms occur, the 1-D ones are read as ``[1 - p, p]``, so that the same
    predictions compare as equal.
    """
    classes = {
        name: 2 if y_prob.ndim == 1 else y_prob.shape[1] for name, (_, y_prob) in checked.items()
    }
    if len(set(classes.values())) > 1:
        raise ValueError(
            f"the methods' probabilities have different numbers of classes {classes}: "
            "compare methods of one problem"
        )
    if {y_prob.ndim for _, y_prob in checked.values()} != {1, 2}:
        return checked
    return {
        name: (y_index, binary_columns(y_prob) if y_prob.ndim == 1 else y_prob)
        for name, (y_index, y_prob) in checked.items()
    }


def fewest_bootstraps(confidence_level: float) -> int:
    r"""The fewest replicates whose percentile interval has a replicate in each tail.

    An interval at level :math:`1 - \alpha` from :math:`B` replicates cuts
    :math:`B \alpha / 2` of them off each end; below one, a bound is an extreme
    replicate (or interpolates towards one) rather than a quantile, so the interval
    says little about the sampling noise. Hence :math:`B \ge 2 / \alpha`.

    >>> fewest_bootstraps(0.95), fewest_bootstraps(0.8)
    (40, 10)
    """
    # The epsilon absorbs the rounding of 1 - level (2 / 0.2 is 10.000000000000002).
    return math.ceil(2.0 / (1.0 - confidence_level) - 1e-9)


def bootstrap_indices(n_samples: int, n_bootstraps: int, random_state=None):
    """Yield the resampled row indices in chunks of replicates.

    Concatenated, the chunks equal
    ``np.random.default_rng(random_state).integers(0, n_samples, (n_bootstraps, n_samples))``
    (a numpy Generator draws the same stream whatever the chunking).

    Examples
    --------
    >>> chunks = list(bootstrap_indices(3, 2, random_state=0))
    >>> np.array_equal(np.concatenate(chunks), np.random.default_rng(0).integers(0, 3, (2, 3)))
    True
    """
    rng = np.random.default_rng(random_state)
    rows = max(1, _CHUNK_INDICES // n_samples)
    for start in range(0, n_bootstraps, rows):
        yield rng.integers(0, n_samples, (min(rows, n_bootstraps - start), n_samples))


def compare(
    y_true,
    predictions: Mapping,
    *,
    metrics: Sequence[str] = DEFAULT_METRICS,
    reference=None,
    n_bootstraps: int = 1000,
    confidence_level: float = 0.95,
    random_state=None,
    n_bins: int = 15,
    mode: str = "top-label",
    labels=None,
) -> pd.DataFrame:
    r"""Compare methods' metrics with paired bootstrap confidence intervals.

    Each replicate :math:`b` resamples the ``n`` rows with replacement (the same
    rows for every method) and computes every metric :math:`M` of every method
    :math:`m`; the difference to the reference method is
    :math:`\Delta^{(b)}_m = M^{(b)}(m) - M^{(b)}(\mathrm{ref})`. Its percentile
    interval at level :math:`1 - \alpha` is the :math:`\alpha/2` and
    :math:`1 - \alpha/2` quantiles of the :math:`\Delta^{(b)}_m`
    (``numpy.percentile``, linear interpolation); the difference is
    ``significant`` when the interval excludes 0. For metrics where lower is
    better (all but ``accuracy``) a significant negative difference is a
    significant improvement over the reference.

    Degenerate bootstraps are refused or flagged: one row (every resample is that
    row, so every interval has width 0) raises ``ValueError``; fewer replicates
    than :math:`2 / \alpha` (40 at 95%) leave less than one replicate in each
    tail, so the bounds are set by the extreme replicates: a ``UserWarning`` says
    so and no difference is called significant. Binary methods given as 1-D
    positive-class probabilities and as two columns are compared in one form:
    when both forms occur, the 1-D ones are read as ``[1 - p, p]`` (their Brier
    score is then on the two-column scale, twice the 1-D one), so that the same
    predictions compare as equal. Methods with different numbers of classes are
    refused.

    Replicate indices are
    ``np.random.default_rng(random_state).integers(0, n, (n_bootstraps, n))``
    (``bootstrap_indices``), drawn in chunks of about a million indices.

    ================  ==========================================================
    ``accuracy``      :func:`accuracy`
    ``ece``           :func:`expected_calibration_error` (uniform bins)
    ``adaptive_ece``  the same with ``strategy="quantile"``
    ``debiased_ece``  :func:`debiased_calibration_error` (Kumar et al.'s
                      debiased L2 estimate, equal-mass bins)
    ``mce``           :func:`maximum_calibration_error` (uniform bins)
    ``ks_ece``        :func:`ks_calibration_error`
    ``signed_ece``    :func:`signed_calibration_error` (mean confidence minus
                      accuracy)
    ``nll``           :func:`negative_log_likelihood`
    ``brier``         :func:`brier_score`
    ================  ==========================================================

    Parameters
    ----------
    y_true : array-like of shape (n,)
        True labels, shared by all methods.
    predictions : mapping of str to array-like of shape (n, K) or (n,)
        Method name to predicted probabilities.
    metrics : sequence of str, default=("ece", "debiased_ece", "nll", "brier")
        Metrics to compare (names above).
    reference : str, optional
        The method the others are compared with; default the first one.
    n_bootstraps : int, default=1000
        Number of bootstrap replicates.
    confidence_level : float, default=0.95
        Coverage of the percentile intervals.
    random_state : int, numpy Generator or None
        Seed of the resampling.
    n_bins : int, default=15
        Bins of the binned metrics.
    mode : {"top-label", "positive"}, default="top-label"
        Which probability the calibration metrics use.
    labels : array-like of shape (K,), optional
        The class of each column.

    Returns
    -------
    pandas.DataFrame
        Index ``(method, metric)``; columns ``value`` (on all rows, by the metric's
        function), ``ci_low`` and ``ci_high`` (its bootstrap interval),
        ``difference`` (``value`` minus the reference's), ``difference_ci_low``,
        ``difference_ci_high`` and ``significant`` (bool). The reference's
        differences are exactly 0 with the interval ``[0, 0]``.

    References
    ----------
    B. Efron, R. Tibshirani. An Introduction to the Bootstrap. Chapman & Hall, 1993.

    Examples
    --------
    >>> rng = np.random.default_rng(0)
    >>> p = rng.uniform(size=2000)
    >>> y = (rng.uniform(size=2000) < p).astype(int)  # p is calibrated
    >>> table = compare(
    ...     y, {"raw": p**3, "calibrated": p}, metrics=["ece", "brier"],
    ...     n_bootstraps=200, random_state=0, mode="positive",
    ... )
    >>> bool(table.loc[("calibrated", "ece"), "significant"])
    True
    >>> float(table.loc[("calibrated", "ece"), "difference"]) < 0
    True
    """
    metrics = _check_metrics(metrics)
    reference, n_bootstraps, confidence_level = _check_settings(
        predictions, reference, n_bootstraps, confidence_level
    )
    n_bins = check_n_bins(n_bins)
    check_mode(mode, SCORE_MODES)
    checked = {}
    for name, y_prob in predictions.items():
        try:
            y_index, probabilities, _ = check_predictions(y_true, y_prob, labels=labels)
        except ValueError as error:
            raise ValueError(f"method {name!r}: {error}") from None
        checked[name] = (y_index, probabilities)
    checked = _in_one_form(checked)
    n_samples = next(iter(checked.values()))[0].shape[0]
    if n_samples < 2:
        raise ValueError(
            "compare resamples the rows, and every resample of a single row is that row: "
            "its intervals would have width 0 whatever the noise; need at least 2 rows"
        )
    resolved = n_bootstraps >= fewest_bootstraps(confidence_level)
    if not resolved:
        # With one method there is no difference to call significant: only the intervals.
        verdict = " No difference is called significant." if len(checked) > 1 else ""
        warnings.warn(
            f"n_bootstraps={n_bootstraps} is too few for {confidence_level:g} intervals: "
            "each tail holds fewer than one replicate (n_bootstraps * (1 - level) / 2 < 1), "
            "so the bounds are set by the extreme replicates; use at least "
            f"{fewest_bootstraps(confidence_level)}.{verdict}",
            UserWarning,
            stacklevel=2,
        )
    samples = {}
    values = {}
    for name, (y_index, probabilities) in checked.items():
        samples[name] = _Samples(y_index, probabilities, n_bins, mode)
        # y_index holds column indices: the default label mapping of the functions.
        values[name] = {
            metric: _point_value(metric, y_index, probabilities, n_bins, mode, None)
            for metric in metrics
        }
    replicates = {name: {metric: [] for metric in metrics} for name in predictions}
    for indices in bootstrap_indices(n_samples, n_bootstraps, random_state):
        for name, method_samples in samples.items():
            for metric, chunk in _replicate_values(method_samples, indices, metrics).items():
                replicates[name][metric].append(chunk)
    tail = 100 * (1 - confidence_level) / 2
    rows = {}
    for name in predictions:
        for metric in metrics:
            own = np.concatenate(replicates[name][metric])
            difference = own - np.concatenate(replicates[reference][metric])
            low, high = np.percentile(own, [tail, 100 - tail])
            difference_low, difference_high = np.percentile(difference, [tail, 100 - tail])
            rows[(name, metric)] = {
                "value": values[name][metric],
                "ci_low": float(low),
                "ci_high": float(high),
                "difference": values[name][metric] - values[reference][metric],
                "difference_ci_low": float(difference_low),
                "difference_ci_high": float(difference_high),
                "significant": resolved and bool(difference_low > 0 or difference_high < 0),
            }
    table = pd.DataFrame.from_dict(rows, orient="index")
    table.index = pd.MultiIndex.from_tuples(table.index, names=["method", "metric"])
    return table
