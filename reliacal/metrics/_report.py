"""A table comparing the calibration of several models on the same labels."""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np
import pandas as pd

from reliacal._validation import check_n_bins, check_probabilities
from reliacal.metrics._predictions import binary_columns
from reliacal.metrics._smooth import smooth_ece_of_scores
from reliacal.metrics._summary import classwise_ece, sample_metrics, summarize

COLUMNS = (
    "accuracy",
    "ece",
    "adaptive_ece",
    "classwise_ece",
    "mce",
    "smooth_ece",
    "nll",
    "brier",
    "overconfidence",
)

_BLOCK_BYTES = 1 << 22


def _smooth_ece(confidence, correct) -> float:
    return smooth_ece_of_scores(confidence, correct)[0]


def _weighted_column_sums(y_prob: np.ndarray, weights: np.ndarray) -> np.ndarray:
    """``sum_i w_i p_ik`` in float64, in row blocks (no (n, K) float64 copy)."""
    totals = np.zeros(y_prob.shape[1])
    block = max(1, _BLOCK_BYTES // (y_prob.shape[1] * y_prob.itemsize))
    for start in range(0, y_prob.shape[0], block):
        totals += weights[start : start + block] @ y_prob[start : start + block].astype(np.float64)
    return totals


def _check_bootstrap(bootstrap, confidence_level) -> tuple[int, float]:
    if isinstance(bootstrap, bool) or not isinstance(bootstrap, int | np.integer) or bootstrap < 0:
        raise ValueError(f"bootstrap must be a non-negative integer, got {bootstrap!r}")
    if not (0 < confidence_level < 1):
        raise ValueError(f"confidence_level must lie in (0, 1), got {confidence_level!r}")
    return int(bootstrap), float(confidence_level)


def _model_row(y_true, y_prob, *, n_bins, labels, bootstrap, rng, confidence_level) -> dict:
    y_index, y_prob, _ = check_probabilities(y_true, y_prob, labels=labels)
    summary = summarize(y_index, y_prob, n_bins)
    row = sample_metrics(
        summary.confidence,
        summary.correct,
        summary.log_loss,
        summary.brier,
        n_bins,
        _smooth_ece,
    )
    row["classwise_ece"] = classwise_ece(summary, n_bins)
    row = {column: row[column] for column in COLUMNS}
    if bootstrap:
        matrix = binary_columns(y_prob) if y_prob.ndim == 1 else y_prob
        n_samples = y_index.shape[0]
        replicates = {column: np.empty(bootstrap) for column in COLUMNS}
        for b in range(bootstrap):
            sample = rng.integers(0, n_samples, n_samples)
            values = sample_metrics(
                summary.confidence[sample],
                summary.correct[sample],
                summary.log_loss[sample],
                summary.brier[sample],
                n_bins,
                _smooth_ece,
            )
            # Classwise bins need every column: weight the samples by multiplicity.
            weights = np.bincount(sample, minlength=n_samples).astype(np.float64)
            values["classwise_ece"] = classwise_ece(
                summary,
                n_bins,
                weights=weights,
                column_sums=_weighted_column_sums(matrix, weights),
            )
            for column in COLUMNS:
                replicates[column][b] = values[column]
        tail = 100 * (1 - confidence_level) / 2
        for column in COLUMNS:
            low, high = np.percentile(replicates[column], [tail, 100 - tail])
            row[f"{column}_ci_low"] = float(low)
            row[f"{column}_ci_high"] = float(high)
    return row


def calibration_report(
    y_true,
    predictions: Mapping,
    *,
    n_bins: int = 15,
    bootstrap: int = 0,
    random_state=None,
    labels=None,
    confidence_level: float = 0.95,
) -> pd.DataFrame:
    r"""Compare models' calibration in one table, one row per model.

    Columns (lower is better except ``accuracy``):

    ========================  ===============================================
    ``accuracy``              fraction of correct arg-max predictions
    ``ece``                   top-label ECE, uniform bins
                              (:func:`expected_calibration_error`)
    ``adaptive_ece``          top-label ECE, equal-mass bins
    ``classwise_ece``         :func:`classwise_calibration_error`
    ``mce``                   maximum calibration error, uniform bins
    ``smooth_ece``            :func:`smooth_calibration_error`
    ``nll``                   :func:`negative_log_likelihood`
    ``brier``                 :func:`brier_score`
    ``overconfidence``        mean confidence minus accuracy: positive means
                              over-confident, negative under-confident
    ========================  ===============================================

    Each probability matrix is read once (one blocked pass for arg-max, true-class
    probabilities, squares and the few classwise entries above ``1 / n_bins``);
    every metric is then computed from O(n) summaries, and each value equals the
    corresponding metric function. With ``bootstrap=B``, the rows are resampled
    ``B`` times and percentile intervals are added as ``<metric>_ci_low`` and
    ``<metric>_ci_high`` (the classwise interval costs one weighted pass over the
    matrix per replicate; the others are O(n)).

    Parameters
    ----------
    y_true : array-like of shape (n,)
        True labels, shared by all models.
    predictions : mapping of str to array-like of shape (n, K) or (n,)
        Model name to predicted probabilities.
    n_bins : int, default=15
        Number of bins of the binned metrics.
    bootstrap : int, default=0
        Number of bootstrap replicates for confidence intervals (0: none).
    random_state : int, numpy Generator or None
        Seed of the bootstrap.
    labels : array-like of shape (K,), optional
        The class of each column.
    confidence_level : float, default=0.95
        Coverage of the bootstrap intervals.

    Returns
    -------
    pandas.DataFrame
        One row per model (index ``model``).

    References
    ----------
    B. Efron, R. Tibshirani. An Introduction to the Bootstrap. Chapman & Hall, 1993.

    Examples
    --------
    >>> y = np.array([0, 1, 1, 0])
    >>> sharp = np.array([[0.9, 0.1], [0.2, 0.8], [0.3, 0.7], [0.6, 0.4]])
    >>> flat = np.full((4, 2), 0.5)
    >>> report = calibration_report(y, {"sharp": sharp, "flat": flat})
    >>> report[["accuracy", "ece", "nll"]].round(3)
           accuracy    ece    nll
    model
    sharp       1.0  0.250  0.299
    flat        0.5  0.000  0.693
    """
    n_bins = check_n_bins(n_bins)
    bootstrap, confidence_level = _check_bootstrap(bootstrap, confidence_level)
    if not isinstance(predictions, Mapping) or len(predictions) == 0:
        raise ValueError(
            "predictions must be a non-empty mapping of model name to probabilities, "
            'e.g. {"model": y_prob}'
        )
    rng = np.random.default_rng(random_state)
    rows = {}
    for name, y_prob in predictions.items():
        try:
            rows[name] = _model_row(
                y_true,
                y_prob,
                n_bins=n_bins,
                labels=labels,
                bootstrap=bootstrap,
                rng=rng,
                confidence_level=confidence_level,
            )
        except ValueError as error:
            raise ValueError(f"model {name!r}: {error}") from None
    report = pd.DataFrame.from_dict(rows, orient="index")
    report.index.name = "model"
    return report
