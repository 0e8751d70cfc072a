"""A table comparing the calibration of several models on the same labels."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any, TypeVar

import numpy as np
import pandas as pd

from reliacal._validation import check_n_bins, check_probabilities
from reliacal.metrics._dask import dask_state, is_dask_collection
from reliacal.metrics._predictions import scan_matrix
from reliacal.metrics._registry import REPORT_COLUMNS, compute, describe
from reliacal.metrics._summary import prediction_matrix, summarize
from reliacal.metrics._sums import MetricSums

COLUMNS = REPORT_COLUMNS

_Result = TypeVar("_Result")


def per_model(
    models: Mapping[str, Any], compute: Callable[[str, Any], _Result]
) -> dict[str, _Result]:
    """``{name: compute(name, value)}`` over ``models``, in order; a ``ValueError`` names its model.

    The reports, the command's streaming states and the figures of several
    models all go through here, so that a bad matrix is reported the same way
    (``model 'name': ...``) wherever it is found.

    Examples
    --------
    >>> per_model({"a": 1, "b": 2}, lambda name, value: f"{name}={value}")
    {'a': 'a=1', 'b': 'b=2'}
    >>> per_model({"bad": "x"}, lambda name, value: int(value))
    Traceback (most recent call last):
    ...
    ValueError: model 'bad': invalid literal for int() with base 10: 'x'
    """
    results = {}
    for name, value in models.items():
        try:
            results[name] = compute(name, value)
        except ValueError as error:
            raise ValueError(f"model {name!r}: {error}") from None
    return results


def model_table(rows: Mapping[str, Mapping[str, Any]]) -> pd.DataFrame:
    """The report's frame: one row per model (index ``model``), one column per entry.

    Examples
    --------
    >>> model_table({"a": {"ece": 0.1}, "b": {"ece": 0.2}})
           ece
    model
    a      0.1
    b      0.2
    """
    table = pd.DataFrame.from_dict(rows, orient="index")
    table.index.name = "model"
    return table


def _check_bootstrap(bootstrap, confidence_level) -> tuple[int, float]:
    if isinstance(bootstrap, bool) or not isinstance(bootstrap, int | np.integer) or bootstrap < 0:
        raise ValueError(f"bootstrap must be a non-negative integer, got {bootstrap!r}")
    if not (0 < confidence_level < 1):
        raise ValueError(f"confidence_level must lie in (0, 1), got {confidence_level!r}")
    return int(bootstrap), float(confidence_level)


def _replicate(summary, matrix, sample, n_bins) -> dict[str, float]:
    """The report's metrics on the rows ``sample`` (drawn with replacement)."""
    # Classwise bins need every column: weight the samples by multiplicity instead
    # of copying the resampled matrix.
    weights = np.bincount(sample, minlength=matrix.shape[0]).astype(np.float64)
    classwise = scan_matrix(
        matrix, summary.y_index, top_label=False, classwise_bins=n_bins, weights=weights
    ).classwise
    sums = MetricSums.of_samples(
        summary.confidence[sample],
        summary.correct[sample],
        summary.log_loss[sample],
        summary.brier[sample],
        classwise,
    )
    return compute(sums, COLUMNS)


def _model_row(y_true, y_prob, *, n_bins, labels, bootstrap, rng, confidence_level) -> dict:
    if is_dask_collection(y_true) or is_dask_collection(y_prob):
        if bootstrap:
            raise ValueError(
                "bootstrap resamples rows in memory and is not available for Dask "
                "collections; compute the report on an in-memory sample for intervals"
            )
        state = dask_state(y_true, y_prob, n_bins=n_bins, labels=labels, keep_confidences=True)
        return state.compute(COLUMNS)
    y_index, y_prob, _ = check_probabilities(y_true, y_prob, labels=labels)
    summary = summarize(y_index, y_prob, n_bins)
    del y_index  # the summary holds it
    sums = MetricSums.of_summary(summary, keep_samples=True)
    if not bootstrap:
        # The per-sample scores and labels are summed already: free them before the
        # quantile and smooth metrics allocate their own O(n) arrays.
        del summary
        return compute(sums, COLUMNS)
    row = compute(sums, COLUMNS)
    matrix = prediction_matrix(y_prob)
    n_samples = summary.y_index.shape[0]
    replicates = {column: np.empty(bootstrap) for column in COLUMNS}
    for b in range(bootstrap):
        values = _replicate(summary, matrix, rng.integers(0, n_samples, n_samples), n_bins)
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

    Columns (lower is better except ``accuracy``), from the package's metric table:

    {columns}

    Each probability matrix is read once (one blocked pass for arg-max, true-class
    probabilities, squares and the classwise bin sums); every metric is then
    computed from O(n) summaries, and each value equals the
    corresponding metric function. With ``bootstrap=B``, the rows are resampled
    ``B`` times and percentile intervals are added as ``<metric>_ci_low`` and
    ``<metric>_ci_high`` (the classwise interval costs one weighted pass over the
    matrix per replicate; the others are O(n)).

    Dask arrays and DataFrames (labels, probabilities, or both) are summarised
    partition by partition where they live, and the per-partition
    :class:`CalibrationState` objects are merged: the streamable columns equal the
    in-memory ones (up to summation order), and the others gather one confidence
    and one correctness flag per row (9 bytes) to the client. No bootstrap then.

    Parameters
    ----------
    y_true : array-like of shape (n,)
        True labels, shared by all models (numpy, or a Dask array or Series).
    predictions : mapping of str to array-like of shape (n, K) or (n,)
        Model name to predicted probabilities (numpy, or a Dask array, or a Dask
        DataFrame with one column per class in class order).
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
    settings = {
        "n_bins": n_bins,
        "labels": labels,
        "bootstrap": bootstrap,
        "rng": rng,
        "confidence_level": confidence_level,
    }
    return model_table(
        per_model(predictions, lambda _name, y_prob: _model_row(y_true, y_prob, **settings))
    )


# The column list is written from the metric table, so that it cannot drift from it.
calibration_report.__doc__ = calibration_report.__doc__.replace(
    "    {columns}", describe(COLUMNS, indent=4)
)
