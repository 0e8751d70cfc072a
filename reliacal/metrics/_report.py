"""A table comparing the calibration of several models on the same labels.

:func:`calibration_report` summarises each whole probability matrix at once, in one
blocked pass. The same table also comes from streaming states
(:func:`report_from_states`): :func:`calibration_states` feeds each model's rows to a
:class:`CalibrationState` block by block (or partition by partition, for Dask
collections), so that memory stays near the input's size; the Dask path of the
report goes through the same states.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any, TypeVar

import numpy as np
import pandas as pd

from reliacal._validation import check_n_bins, to_numpy
from reliacal.metrics._dask import dask_state, is_dask_collection
from reliacal.metrics._inputs import (
    check_prediction_inputs,
    in_class_order,
    is_pandas_frame,
    rows_shifted,
)
from reliacal.metrics._predictions import scan_matrix
from reliacal.metrics._registry import REPORT_COLUMNS, STREAMABLE, compute, describe
from reliacal.metrics._sorted import sort_scores
from reliacal.metrics._streaming import CalibrationState
from reliacal.metrics._summary import prediction_matrix, summarize
from reliacal.metrics._sums import MetricSums

COLUMNS = REPORT_COLUMNS
# The report's columns that stream from bin sums: all a state without confidences has.
STREAMABLE_COLUMNS = tuple(name for name in REPORT_COLUMNS if name in STREAMABLE)

# Rows per block of calibration_states: 2**16 rows of 1,000 float64 classes are 0.5 GB
# of input, but the per-block temporaries are O(rows), a few megabytes.
BLOCK_ROWS = 1 << 16

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


def _check_models(predictions) -> None:
    if not isinstance(predictions, Mapping) or len(predictions) == 0:
        raise ValueError(
            "predictions must be a non-empty mapping of model name to probabilities, "
            'e.g. {"model": y_prob}'
        )


def _state_of(y_true, y_prob, *, n_bins, labels, keep_confidences) -> CalibrationState:
    """One model's state: Dask partition by partition, other input block by block.

    A Dask collection's confidences are not gathered: its state keeps a histogram of
    them, refined by further passes over the partitions.
    """
    if is_dask_collection(y_true) or is_dask_collection(y_prob):
        return dask_state(y_true, y_prob, n_bins=n_bins, labels=labels, histogram=keep_confidences)
    if is_pandas_frame(y_prob):
        y_prob, labels = in_class_order(y_prob, labels)
    y_true = to_numpy(y_true, "y_true")
    y_prob = to_numpy(y_prob, "y_prob")
    state = CalibrationState(n_bins, labels=labels, keep_confidences=keep_confidences)
    if y_true.ndim != 1 or y_prob.ndim == 0 or y_prob.shape[0] == 0:
        return state.update(y_true, y_prob)  # refused as the metric functions refuse it
    if y_true.shape[0] != y_prob.shape[0]:
        raise ValueError(
            "y_true and y_prob have different lengths: "
            f"{y_true.shape[0]} labels for {y_prob.shape[0]} rows of probabilities"
        )
    for start in range(0, y_true.shape[0], BLOCK_ROWS):
        stop = start + BLOCK_ROWS
        try:
            state.update(y_true[start:stop], y_prob[start:stop])
        except ValueError as error:
            raise ValueError(rows_shifted(str(error), start)) from None
    return state


def report_columns(*, streamable_only: bool = False) -> tuple[str, ...]:
    """The columns of :func:`calibration_report`, in order (from the metric table).

    Parameters
    ----------
    streamable_only : bool, default=False
        Only the columns that stream from bin sums: those that a
        :class:`CalibrationState` without ``keep_confidences`` computes.

    Returns
    -------
    tuple of str

    Examples
    --------
    >>> report_columns(streamable_only=True)[:3]
    ('accuracy', 'ece', 'classwise_ece')
    """
    return STREAMABLE_COLUMNS if streamable_only else REPORT_COLUMNS


def calibration_states(
    y_true,
    predictions: Mapping,
    *,
    n_bins: int = 15,
    labels=None,
    keep_confidences: bool = True,
) -> dict[str, CalibrationState]:
    """One :class:`CalibrationState` per model, fed its rows block by block.

    :func:`calibration_report` summarises a whole probability matrix at once; on a
    matrix of hundreds of megabytes its per-sample temporaries cost several times
    the matrix. Here each model's rows feed a state ``BLOCK_ROWS`` (65,536) rows at
    a time: the state keeps per-bin sums and, with ``keep_confidences``, one
    confidence and one correctness flag per sample, so once the states are built the
    matrices can be freed before :func:`report_from_states` sorts and smooths the
    confidences. Dask collections are summarised partition by partition where they
    live (as the metric functions do); their states keep, instead of the
    confidences, a fine histogram of them that further passes over the partitions
    refine until the sorted and smoothed columns are exact (constant memory on the
    client).

    Parameters
    ----------
    y_true : array-like of shape (n,)
        True labels, shared by the models (numpy, or a Dask array or Series).
    predictions : mapping of str to array-like of shape (n, K) or (n,)
        Model name to probabilities (numpy, a pandas or Dask DataFrame, a Dask array).
    n_bins : int, default=15
        Bins of the binned metrics.
    labels : array-like of shape (K,), optional
        The class of each column.
    keep_confidences : bool, default=True
        Keep what the sorted and smoothed columns need (False: the streamable
        columns only, in constant memory).

    Returns
    -------
    dict of str to CalibrationState

    Raises
    ------
    ValueError
        As :func:`calibration_report` does, the message starting with the model's name.

    Examples
    --------
    >>> y = np.array([0, 1, 1, 0])
    >>> probs = np.array([[0.9, 0.1], [0.2, 0.8], [0.3, 0.7], [0.6, 0.4]])
    >>> states = calibration_states(y, {"sharp": probs})
    >>> states["sharp"].n_samples
    4
    """
    n_bins = check_n_bins(n_bins)
    _check_models(predictions)
    settings = {"n_bins": n_bins, "labels": labels, "keep_confidences": keep_confidences}
    return per_model(predictions, lambda _name, y_prob: _state_of(y_true, y_prob, **settings))


def report_from_states(
    states: Mapping[str, CalibrationState], *, streamable_only: bool = False
) -> pd.DataFrame:
    """The table of :func:`calibration_report` from streaming states, one row per model.

    The states may come from :func:`calibration_states`, from batches of a training
    loop or from workers (merged with :meth:`CalibrationState.merge`); the values
    equal ``calibration_report``'s on the same data up to floating-point summation
    order.

    Parameters
    ----------
    states : mapping of str to CalibrationState
        Model name to a state built with ``keep_confidences=True`` (or any state,
        with ``streamable_only=True``).
    streamable_only : bool, default=False
        Only the columns that stream from bin sums (:func:`report_columns`).

    Returns
    -------
    pandas.DataFrame
        One row per model (index ``model``), the columns of ``calibration_report``.

    Examples
    --------
    >>> y = np.array([0, 1, 1, 0])
    >>> probs = np.array([[0.9, 0.1], [0.2, 0.8], [0.3, 0.7], [0.6, 0.4]])
    >>> table = report_from_states(calibration_states(y, {"sharp": probs}))
    >>> expected = calibration_report(y, {"sharp": probs})
    >>> bool(np.allclose(table.to_numpy(), expected.to_numpy(), rtol=1e-12))
    True
    """
    if not isinstance(states, Mapping) or len(states) == 0:
        raise ValueError("states must be a non-empty mapping of model name to CalibrationState")
    columns = report_columns(streamable_only=streamable_only)

    def row(_name: str, state) -> dict[str, float]:
        if not isinstance(state, CalibrationState):
            raise ValueError(f"expected a CalibrationState, got {type(state).__name__}")
        return state.compute(columns)

    return model_table(per_model(states, row))


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
        state = _state_of(y_true, y_prob, n_bins=n_bins, labels=labels, keep_confidences=True)
        return state.compute(COLUMNS)
    y_index, y_prob, _, values = check_prediction_inputs(y_true, y_prob, labels=labels)
    # One pass over the matrix (its value checks included), then O(n) work only.
    summary = summarize(y_index, y_prob, n_bins, values)
    del y_index  # the summary holds it
    if not bootstrap:
        # One sort serves the uniform and quantile bins, KS and the sweep; the
        # per-sample scores and labels are summed already: free them before the
        # smooth metric allocates its own O(n) arrays.
        log_loss, brier = float(np.sum(summary.log_loss)), float(np.sum(summary.brier))
        scores, classwise = (summary.confidence, summary.correct), summary.classwise
        del summary
        # A float32 matrix's confidences are float32 numbers: 4-byte sort keys.
        float32_values = y_prob.ndim == 2 and y_prob.dtype == np.float32
        confidence, correct = sort_scores(*scores, float32_values=float32_values)
        del scores
        sums = MetricSums.of_samples(
            confidence, correct, log_loss, brier, classwise, is_sorted=True
        )
        del confidence, correct
        return compute(sums, COLUMNS)
    sums = MetricSums.of_summary(summary, keep_samples=True)
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
    in-memory ones (up to summation order). The others come from a fine histogram
    of the confidences, merged the same way and refined by further passes over the
    partitions where a quantile cut, a candidate maximum of the KS curve or an
    undecided bin count of the sweep needs the samples' order: they equal the
    in-memory ones too, in constant memory on the client (usually two passes). No
    bootstrap then.

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
    _check_models(predictions)
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
